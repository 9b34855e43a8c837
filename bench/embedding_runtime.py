"""The local embedding model's two runtimes, side by side in one process and one run: the server's
(ONNX Runtime over the export, ``mirix_site.providers.local_model``) and sentence-transformers over
torch (the runtime before it, and the reference for the vectors).

For each: p50 / p95 of one query (what every recall, recommend and search waits for), and texts
per second over LongMemEval-S turns (what ingest waits for) at several batch sizes; and how far
the two runtimes' vectors are apart. One thread each (the server's EMBEDDING_THREADS). Then
the server's batching, texts per forward pass bounded by a token budget once padded
(``LocalEmbeddingProvider._BATCH_TOKENS``), over the same turns and over short texts, the task
and action of ``bench.experiences``' experiences (``bench.experiences_data``), at several budgets.

    python -m bench.embedding_runtime [--queries 200] [--turns 192] [--smoke]

Runs without a server or a database; the export is written under ``--model-dir`` if absent.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from bench.common import PROJECT_DIR, SMOKE_NOTE, command_line, load_average, percentile
from bench.experiences_data import data_generate

BENCH_DATA = PROJECT_DIR.parent / "shared" / "bench-data" / "longmemeval"
QUERIES = (
    "how do I fix the timeout when the deploy fails",
    "What was my previous occupation?",
    "find me a cheap flight to Paris next week",
    "the museums I visited in February",
    "which caching did we add to the checkout service",
    "Why did the nightly import fail last Tuesday?",
)
BATCH_SIZES = (1, 2, 4, 16, 64)
BATCH_TOKENS = (128, 256, 512, 1024)


def turns_read(path: Path, count: int) -> list[str]:
    """``count`` turns of the file's first question's haystack, drawn with a fixed seed."""
    with gzip.open(path, "rt") as file:
        question = json.load(file)[0]
    turns = [turn["content"] for session in question["haystack_sessions"] for turn in session]
    return random.Random(0).sample(turns, min(count, len(turns)))


def query_times(embed: Callable[[list[str]], object], count: int) -> list[float]:
    queries = [f"{QUERIES[index % len(QUERIES)]} ({index})" for index in range(count)]
    for query in queries[:10]:  # warm-up
        embed([query])
    seconds = []
    for query in queries:
        start = time.perf_counter()
        embed([query])
        seconds.append(time.perf_counter() - start)
    return seconds


def rate(embed: Callable[[list[str]], object], texts: Sequence[str]) -> float:
    start = time.perf_counter()
    embed(list(texts))
    return len(texts) / (time.perf_counter() - start)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--turns", type=int, default=192)
    parser.add_argument("--model-dir", type=Path, default=PROJECT_DIR / ".mirix-data" / "models")
    parser.add_argument(
        "--data", type=Path, default=BENCH_DATA / "longmemeval_s_cleaned_sample60.json.gz"
    )
    parser.add_argument("--smoke", action="store_true", help="a few texts: the shape, not figures")
    argv = sys.argv[1:] if argv is None else list(argv)
    arguments = parser.parse_args(argv)
    if arguments.smoke:
        arguments.queries, arguments.turns = 12, 6

    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from sentence_transformers import SentenceTransformer

    from mirix_site.providers.local_model import local_model_load, local_model_weights

    torch.set_num_threads(1)
    exported = local_model_load(arguments.model_dir, threads=1)
    reference = SentenceTransformer(str(local_model_weights()), device="cpu")
    texts = turns_read(arguments.data, arguments.turns)

    print(f"command: {command_line('bench.embedding_runtime', argv)}")
    print(f"load average before: {load_average()}")
    print(f"turns: {len(texts)}, mean {sum(map(len, texts)) / len(texts):.0f} characters")

    def onnx(batch_size: int) -> Callable[[list[str]], np.ndarray]:
        return lambda batch: exported.embed(batch, batch_size=batch_size)

    def torch_runtime(batch_size: int) -> Callable[[list[str]], np.ndarray]:
        return lambda batch: reference.encode(
            batch, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False
        )

    apart = np.abs(onnx(4)(texts) - torch_runtime(64)(texts)).max()
    print(f"largest difference between the runtimes' vectors: {apart:.2e}")
    print("| runtime | query p50 | query p95 | " + " | ".join(f"batch {b}" for b in BATCH_SIZES))
    for name, runtime in (("onnxruntime", onnx), ("sentence-transformers", torch_runtime)):
        seconds = query_times(runtime(1), arguments.queries)
        rates = [rate(runtime(size), texts) for size in BATCH_SIZES]
        print(
            f"| {name} | {percentile(seconds, 0.5) * 1000:.1f} ms "
            f"| {percentile(seconds, 0.95) * 1000:.1f} ms | "
            + " | ".join(f"{value:.1f} texts/s" for value in rates)
        )
    experiences = data_generate(
        experiences=arguments.turns, queries=1, warmup=0, seed=7, query_seed="runtime"
    ).experiences
    short = [f"{row['task']}\n{row['action']}" for row in experiences]
    print(
        "| onnxruntime, texts | one at a time | " + " | ".join(f"{b} tokens" for b in BATCH_TOKENS)
    )
    for name, batch in (("LongMemEval turns", texts), ("experiences", short)):
        counts = sorted(exported.count_tokens(text) for text in batch)
        tokens = f"{percentile(counts, 0.5):.0f} / {percentile(counts, 0.9):.0f} tokens p50 / p90"
        rates = [rate(onnx(1), batch)] + [
            rate(
                lambda chunk, b=budget: exported.embed(chunk, batch_size=64, batch_tokens=b), batch
            )
            for budget in BATCH_TOKENS
        ]
        print(f"| {name} ({tokens}) | " + " | ".join(f"{value:.1f} texts/s" for value in rates))
    print(f"load average after: {load_average()}")
    if arguments.smoke:
        print(SMOKE_NOTE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
