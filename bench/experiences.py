"""Experiences: record throughput and recall / recommend latency through HTTP, beside Mimir
0.1.5 in-process on the same data in the same run.

Data, generated from a seed (``--seed``) and used by both sides. 40 subjects (8 kinds of
system, 5 each: "checkout service", "orders PostgreSQL cluster", "nightly ETL job", ...) x 20
symptoms ("p99 latency spikes after deploy", ...) make 800 tasks; a task's text is one of three
phrasings of its pair, some with a detail ("checkout service: p99 latency spikes after deploy
(in eu-west-1)"). 200 actions, 25 per kind of system: a subject's plausible actions are its
kind's. Each of the ``--experiences`` (10,000) draws a task, then its action: the task's own best
action (one of its kind's, fixed per task) 30 % of the time, another of its kind's otherwise.
Outcomes are exactly 60 / 30 / 10 % success / failure / partial: experiences are ranked by a
latent draw (normal noise, +1 for the task's best action) and the top 60 % succeed, the next
10 % are partial, the rest fail, so the best action does succeed more often, as it would.
``context`` holds an environment and a region. Queries are paraphrased or partial task phrases,
most with a detail ("checkout tail latency jumps after a release again", "random bad gateway
errors"), none a stored task's text: ``--queries`` (300) for recall, as many others for
recommend, ``--warmup`` (20) more and ``--pairs`` (half of ``--queries``) more, all distinct (no
recall or recommend query is answered from a cache of its embedding made by the other
operation) and drawn afresh each run, seeded by its start time (the server caches query
embeddings in Redis for 24 h). ``bench.experiences_data`` generates it.

Our side, against ``--base-url`` with ``--api-key``, as one fresh end user ``exbench-<UTC
time>`` (deleted at the end unless ``--keep``):

1. record single: ``--threads`` (4) keep-alive connections send the first ``--single`` (2,000)
   experiences, one ``POST /experiences`` each; experiences/s over the whole load.
2. record batch: the rest (8,000) as ``POST /experiences`` with ``experiences`` of
   ``--batch-size`` (500), over the same number of connections; experiences/s.
3. recallable: the server embeds experiences in its worker after the write. ``GET
   /experiences/stats`` is polled until it counts all of them and none is waiting for its
   embedding (``EMBEDDING_PENDING_FIELD``); the time from the first write to then gives the
   experiences/s from write to recallable.

Mimir's side (``--mimir-python``: the python of a virtualenv with ``mimir-learn==0.1.5``, and,
for hybrid recall, its ``embeddings`` extra) then records: this file runs under that python as a
child process (``--mimir-child``), given the same experiences as JSON in a temporary directory,
and stores into a SQLite file there (Mimir's default store: WAL, one commit per write). With
``--mimir-embeddings model`` (the default when sentence-transformers imports there) Mimir embeds
with the same local all-MiniLM-L6-v2 the server uses, offline, with ``--torch-threads`` (2, as
many as a web process of the server gives its model: EMBEDDING_THREADS); ``none`` leaves Mimir
keyword-only (FTS5). Its vector search runs on sqlite-vec when its ``vector`` extra is installed
and that python's sqlite3 loads extensions (pyenv's 3.11.7 here does not, Debian's
/usr/bin/python3.11 does), else as a Python cosine scan of every row (2 s a recall at 10,000
here); the output says which. Mimir has no batch write: record single is ``record()`` from
``--threads`` threads (Mimir serialises writes with a lock; its reads use a connection per
thread), and its bulk path, the fastest it offers, is ``write()`` of pre-built experiences whose
embeddings were computed in one batched model call (counted in its time). Each Mimir write also
deletes its id from the FTS5 table, where the id is UNINDEXED: a scan of the table, so writes
slow down as the store grows (the bulk part, written second, pays more per row). Mimir embeds
before a write returns, our server after it answers: "write to recallable" compares the two.
The record phases run one side after the other (they measure throughput, each alone).

Then the queries, both sides interleaved query by query, so that whatever else loads the
machine loads both alike: the child stays alive after recording and answers one query at a
time over a pipe (a JSON line in on its stdin, ``{"op": "recall"|"recommend", "query": ...}``;
one out on its stdout, ``{"ms": ..., "result": ...}``, where ``ms`` is the call timed in-process
around ``recall(k=5)`` or ``recommend()``, the pipe outside it). Each query is asked of our
server (one keep-alive connection, ``GET /experiences/recall?k=5`` or ``GET
/experiences/recommend``; the client's time, request sent to body read, and each
``Server-Timing`` entry) and of Mimir, the side asked first alternating from query to query:

4. warm-up: each ``--warmup`` query as recall then recommend, unmeasured.
5. recall: every recall query; then recommend: every recommend query. A query whose embedding
   our server read from its query-embedding cache (``Server-Timing`` ``embed;desc="cache"``: a
   query a run of the last 24 h happened to draw too) ran no model:
   it is counted beside and left out of the p50 / p95 / mean of both sides, which are over the
   queries our server embedded with its model (Mimir's over the same queries).
6. one task, both asked: agents ask recall and then recommend for the same task. Each of the
   ``--pairs`` queries is asked as recall then recommend with the same text, by one side and
   then the other (alternating who is first). Its recommend finds the query's embedding in the
   cache the recall just filled, a cache hit by design: its latency is reported on its own.
   Mimir's recommend embeds nothing (it sums the outcomes of its FTS5 matches; its recall keeps
   query embeddings in an in-process LRU, which no query of a run finds twice): the pattern
   changes nothing on its side.

Both sides also score what they answered in step 5, as a sanity check (figures are not the
point): ``same task@5`` is the share of recall's top 5 whose task is the query's (subject,
symptom) pair, over the queries that name a subject; ``best action`` is the share of those
queries whose recommended action is the pair's best action.

Goals (issue [17/18] item 4), on a quiet machine, in one run: recommend p50 <= 20 ms and p95 <=
30 ms over HTTP and p50 >= 3x Mimir's in-process; recall p50 <= 12 ms and >= 2.5x Mimir's;
record single >= 300/s. Ratios are printed as ours / Mimir's for throughput and Mimir's / ours
for latency (above 1: ours better), the latency ones from the interleaved queries.

Run against a live server with the rate limit raised, on a quiet machine; the date, the command
line and the load average at start and end are printed (RESULTS.md wants what ran beside):

    API_RATE_LIMIT=10000000/min make run
    /usr/bin/python3.11 -m venv /work/mimir-venv
    /work/mimir-venv/bin/pip install "mimir-learn[embeddings,vector]==0.1.5"
    .venv/bin/python -m bench.experiences --mimir-python /work/mimir-venv/bin/python
        [--base-url URL] [--api-key KEY] [--experiences 10000] [--single 2000]
        [--batch-size 500] [--threads 4] [--queries 300] [--warmup 20] [--pairs 150]
        [--seed 7] [--mimir-embeddings auto|model|none] [--torch-threads 2] [--keep]
        [--json-out FILE] [--smoke]

``--smoke``: 200 experiences (40 single, 4 batches of 40), 8 queries, 2 warm-up, 4 pairs; Mimir
only if ``--mimir-python`` is given.

The top level of this module imports only the standard library, ``bench.common`` and
``bench.experiences_data`` (which do too), so that Mimir's python can run it as the child.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from bench.common import (
    PROGRESS_EVERY_SECONDS,
    PROJECT_DIR,
    RATE_LIMIT_HINT,
    SMOKE_NOTE,
    BenchError,
    KeepAliveClient,
    LoadResult,
    RequestFactory,
    api_key_read,
    arguments_parse,
    load_average,
    local_model_path,
    percentile,
    run_load,
    run_start,
    server_arguments,
    verdict,
)
from bench.experiences_data import OUTCOME_SHARES, Data, data_generate

GOAL_RECOMMEND_P50_MS = 20.0
GOAL_RECOMMEND_P95_MS = 30.0
GOAL_RECOMMEND_RATIO = 3.0
GOAL_RECALL_P50_MS = 12.0
GOAL_RECALL_RATIO = 2.5
GOAL_RECORD_SINGLE_PER_SECOND = 300.0
RECALL_K = 5
# A query embedding read from the server's cache took 0.4-1.2 ms here, a model run 6 ms or more.
# How the server's Server-Timing marks a query embedding read from its cache.
EMBED_CACHED_MARK = 'embed;desc="cache"'
# The field of GET /experiences/stats that counts experiences still waiting for their embedding.
EMBEDDING_PENDING_FIELD = "embedding_pending"
MIMIR_VERSION = "0.1.5"
SMOKE = {
    "experiences": 200,
    "single": 40,
    "batch_size": 40,
    "queries": 8,
    "warmup": 2,
    "pairs": 4,
    "poll_interval": 0.2,
    "stall_seconds": 60.0,
}


# --- Figures --------------------------------------------------------------------------------


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": percentile(values, 0.5),
        "p95_ms": percentile(values, 0.95),
        "mean_ms": statistics.fmean(values) if values else math.nan,
    }


@dataclass
class Latency:
    """Times of one kind of request, one entry per request: the client's (ms), each
    Server-Timing entry's, and whether the server read the query's embedding from its cache
    (Mimir's side: its in-process time, no entries, never counted as cached)."""

    client_ms: list[float] = field(default_factory=list)
    server_ms: list[dict[str, float]] = field(default_factory=list)
    cached: list[bool] = field(default_factory=list)

    def add(
        self, ms: float, server_ms: dict[str, float] | None = None, *, cached: bool = False
    ) -> None:
        self.client_ms.append(ms)
        self.server_ms.append(server_ms or {})
        self.cached.append(cached)

    def summary(self, *, left_out: Sequence[bool] | None = None) -> dict[str, Any]:
        """p50 / p95 / mean over the requests not ``left_out`` (by default those whose query
        embedding came from the cache: the figures are of model runs), then over all."""
        left_out = self.cached if left_out is None else left_out
        kept = [index for index, out in enumerate(left_out) if not out]
        names = dict.fromkeys(name for timings in self.server_ms for name in timings)
        return {
            "n": len(self.client_ms),
            "embed_cached": sum(self.cached),
            "counted": len(kept),
            **_spread([self.client_ms[index] for index in kept]),
            "all": _spread(self.client_ms),
            "server_timing": {
                name: _spread(
                    [self.server_ms[index][name] for index in kept if name in self.server_ms[index]]
                )
                for name in names
            },
        }


@dataclass
class Answers:
    """One side's query phase: the timed requests and what they answered."""

    recall: Latency = field(default_factory=Latency)
    recommend: Latency = field(default_factory=Latency)
    recalled_tasks: list[list[str]] = field(default_factory=list)
    recommended: list[str | None] = field(default_factory=list)
    # One task, both asked: recall then recommend of the same text.
    pair_recall: Latency = field(default_factory=Latency)
    pair_recommend: Latency = field(default_factory=Latency)

    def summary(self, data: Data, *, left_out: Answers | None = None) -> dict[str, Any]:
        """The figures as the JSON document holds them; ``left_out``: the side whose cache hits
        are left out of these figures too (ours, for Mimir: the same queries on both sides)."""
        reference = left_out or self
        everything = [False] * len(self.pair_recall.client_ms)
        return {
            "recall": self.recall.summary(left_out=reference.recall.cached),
            "recommend": self.recommend.summary(left_out=reference.recommend.cached),
            "pairs": {
                "recall": self.pair_recall.summary(left_out=everything),
                "recommend": self.pair_recommend.summary(left_out=everything),
            },
            "quality": quality_figures(data, self.recalled_tasks, self.recommended),
        }


def quality_figures(
    data: Data, recalled_tasks: list[list[str]], recommended: list[str | None]
) -> dict[str, Any]:
    """``same task@5`` and ``best action`` (see the module's docstring) over the queries that
    name a subject; recall's unknown tasks (not this run's) count as misses."""
    hits = slots = 0
    for query, tasks in zip(data.recall_queries, recalled_tasks, strict=True):
        pair = data.pair_of_query[query]
        if pair is not None:
            slots += RECALL_K
            hits += sum(data.pair_of_task.get(task) == pair for task in tasks[:RECALL_K])
    best = named = 0
    for query, action in zip(data.recommend_queries, recommended, strict=True):
        pair = data.pair_of_query[query]
        if pair is not None:
            named += 1
            best += action == data.best_actions[pair]
    found = sum(action is not None for action in recommended)
    return {
        "same_task_at_5": hits / slots if slots else math.nan,
        "best_action": best / named if named else math.nan,
        "recommend_found": found / len(recommended) if recommended else math.nan,
        "recall_queries_naming_a_subject": slots // RECALL_K,
        "recommend_queries_naming_a_subject": named,
    }


# --- Mimir, in its own python -----------------------------------------------------------------


# Mimir's defaults (mimir.ranking.default_score), for its bulk path, which builds experiences.
OUTCOME_DEFAULT_SCORES = {"success": 1.0, "partial": 0.5, "failure": 0.0}


def _note(text: str) -> None:
    print(f"  mimir: {text}", file=sys.stderr, flush=True)


def _mimir_model(spec: dict[str, Any]) -> Any:
    """The server's model, as the server loads it (offline, ``torch_threads`` threads); None
    for keyword-only."""
    if not spec["model_path"]:
        return None
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    torch.set_num_threads(spec["torch_threads"])
    transformers_logging.disable_progress_bar()
    return SentenceTransformer(spec["model_path"], device="cpu")


def _mimir_embed(model: Any, texts: list[str]) -> list[list[float]]:
    # As the server embeds: normalised, 64 texts per forward pass.
    matrix = model.encode(texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False)
    return matrix.tolist()


def _mimir_record(memory: Any, spec: dict[str, Any], model: Any) -> dict[str, Any]:
    """record() of the first ``single`` from ``threads`` threads, then write() of the rest
    with embeddings computed in one batched call: Mimir's fastest bulk path (it has no batch
    write; each write() is its own commit)."""
    from mimir import Experience

    experiences, single, threads = spec["experiences"], spec["single"], spec["threads"]

    def record_share(index: int) -> None:
        for body in experiences[index:single:threads]:
            memory.record(
                task=body["task"],
                action=body["action"],
                outcome=body["outcome"],
                context=body["context"],
            )

    workers = [threading.Thread(target=record_share, args=(index,)) for index in range(threads)]
    began = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    seconds = time.perf_counter() - began
    figures: dict[str, Any] = {
        "record_single": {"count": single, "seconds": seconds, "per_second": single / seconds}
    }
    _note(f"record() x {single:,} from {threads} threads: {single / seconds:,.0f}/s")

    rest = experiences[single:]
    began = time.perf_counter()
    vectors: list[list[float] | None] = [None] * len(rest)
    if model is not None:
        # Experience.text(), what Mimir embeds and indexes.
        vectors = _mimir_embed(model, [f"{body['task']}\n{body['action']}" for body in rest])
    embedded = time.perf_counter()
    for body, vector in zip(rest, vectors, strict=True):
        memory.write(
            Experience(
                task=body["task"],
                action=body["action"],
                outcome=body["outcome"],
                context=body["context"],
                score=OUTCOME_DEFAULT_SCORES[body["outcome"]],
                embedding=vector,
            )
        )
    seconds = time.perf_counter() - began
    figures["record_bulk"] = {
        "count": len(rest),
        "seconds": seconds,
        "per_second": len(rest) / seconds if rest else math.nan,
        "embed_seconds": embedded - began,
    }
    _note(f"bulk write() x {len(rest):,}: {len(rest) / seconds:,.0f}/s")
    # Mimir's writes return recallable (embedded, indexed): the figure for our server's
    # write-to-recallable.
    total_seconds = figures["record_single"]["seconds"] + seconds
    figures["recallable"] = {
        "count": len(experiences),
        "seconds": total_seconds,
        "per_second": len(experiences) / total_seconds,
    }
    if memory.count() != len(experiences):
        raise SystemExit(f"Mimir holds {memory.count()} experiences, not {len(experiences)}")
    return figures


def _mimir_answer(memory: Any, request: dict[str, Any]) -> dict[str, Any]:
    """One query, timed in-process around Mimir's own call."""
    op, query = request.get("op"), request.get("query")
    if op == "recall":
        began = time.perf_counter()
        results = memory.recall(query, k=RECALL_K)
        ms = (time.perf_counter() - began) * 1000
        return {"ms": ms, "result": [experience.task for experience in results]}
    if op == "recommend":
        began = time.perf_counter()
        recommendation = memory.recommend(query)
        ms = (time.perf_counter() - began) * 1000
        return {"ms": ms, "result": recommendation.recommended_action if recommendation else None}
    return {"error": f"unknown op {op!r}"}


def mimir_child(data_path: Path) -> int:
    """Run under Mimir's python: time its writes of the experiences in ``data_path`` (written
    by the parent) into a store beside it, send their figures as one JSON line, then answer
    queries, one JSON line in (stdin) and one out (stdout) each, until stdin closes."""
    # The pipe is this process's stdout: anything a library prints goes to stderr instead.
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    import mimir
    from mimir import Mimir
    from mimir.embeddings import Embedder

    spec = json.loads(data_path.read_text())
    model = _mimir_model(spec)

    class LocalEmbedder(Embedder):
        def embed(self, text: str) -> list[float]:
            return _mimir_embed(model, [text])[0]

    memory = Mimir(
        db_path=str(data_path.parent / "mimir.db"),
        embedder=LocalEmbedder() if model is not None else None,
    )
    # Mimir uses sqlite-vec when it is installed and this python's sqlite3 loads extensions.
    if model is None:
        vector_index = "-"
    elif memory.storage.vec_enabled:
        vector_index = "sqlite-vec"
    else:
        vector_index = "none (a Python cosine scan of every row)"
    try:
        figures = {
            "version": mimir.__version__,
            "embeddings": "all-MiniLM-L6-v2" if model is not None else "none (keyword only)",
            "vector_index": vector_index,
            "torch_threads": spec["torch_threads"] if model is not None else None,
            **_mimir_record(memory, spec, model),
        }
        channel.write(json.dumps({"figures": figures}) + "\n")
        for line in sys.stdin:
            channel.write(json.dumps(_mimir_answer(memory, json.loads(line))) + "\n")
    finally:
        memory.close()
    return 0


def _mimir_can_embed(python: str) -> bool:
    probe = subprocess.run(  # noqa: S603 - the python the operator named
        [python, "-c", "import mimir, sentence_transformers"], capture_output=True, check=False
    )
    return probe.returncode == 0


class MimirChild:
    """Mimir under ``--mimir-python``, on the same experiences: started, it records them (its
    figures in ``figures``); then ``ask`` puts one query to it at a time. A context manager:
    leaving closes its stdin, and it exits."""

    def __init__(self, arguments: argparse.Namespace, data: Data) -> None:
        embeddings = arguments.mimir_embeddings
        if embeddings == "auto":
            embeddings = "model" if _mimir_can_embed(arguments.mimir_python) else "none"
        elif embeddings == "model" and not _mimir_can_embed(arguments.mimir_python):
            raise BenchError(
                f"{arguments.mimir_python} cannot import mimir and sentence_transformers (pip "
                f'install "mimir-learn[embeddings]=={MIMIR_VERSION}" there)'
            )
        spec = {
            "experiences": data.experiences,
            "single": arguments.single,
            "threads": arguments.threads,
            "model_path": local_model_path() if embeddings == "model" else None,
            "torch_threads": arguments.torch_threads,
        }
        self.directory = tempfile.TemporaryDirectory(prefix="exbench-mimir-")
        data_path = Path(self.directory.name) / "data.json"
        data_path.write_text(json.dumps(spec))
        command = [arguments.mimir_python, "-m", "bench.experiences", "--mimir-child"]
        self.process = subprocess.Popen(  # noqa: S603 - the python the operator named, this file
            [*command, str(data_path)],
            cwd=PROJECT_DIR,
            env=os.environ | {"PYTHONPATH": str(PROJECT_DIR)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        try:
            self.figures: dict[str, Any] = self._receive()["figures"]
        except BaseException:
            self.close()
            raise
        if self.figures["version"] != MIMIR_VERSION:
            print(f"note: Mimir {self.figures['version']}, not {MIMIR_VERSION}", flush=True)

    def _receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise BenchError(f"the Mimir child exited with {self.process.wait()}")
        reply = json.loads(line)
        if "error" in reply:
            raise BenchError(f"the Mimir child: {reply['error']}")
        return reply

    def ask(self, op: str, query: str, latency: Latency | None) -> Any:
        """Mimir's answer to one recall or recommend; its in-process time to ``latency``."""
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps({"op": op, "query": query}) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            raise BenchError(f"the Mimir child exited with {self.process.wait()}") from None
        reply = self._receive()
        if latency is not None:
            latency.add(reply["ms"])
        return reply["result"]

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.directory.cleanup()

    def __enter__(self) -> MimirChild:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# --- Our side, through HTTP -------------------------------------------------------------------

SERVER_TIMING = re.compile(r"([\w.-]+)\s*;(?:[^,]*?;)?\s*dur=([\d.]+)")


def _check_key(client: KeepAliveClient) -> None:
    status, payload = client.request("GET", "/users?limit=1")
    if status == 401:
        raise BenchError(f"401: the API key was refused ({payload})")
    if status == 429:
        raise BenchError(RATE_LIMIT_HINT)
    if status != 200:
        raise BenchError(f"GET /users answered {status} {payload}")


def _stats(client: KeepAliveClient, user_id: str) -> dict[str, Any]:
    status, payload = client.request("GET", f"/experiences/stats?{urlencode({'user_id': user_id})}")
    if status != 200 or not isinstance(payload, dict):
        raise BenchError(f"GET /experiences/stats answered {status} {payload}")
    return payload


def _check_statuses(result: LoadResult, expected: int) -> None:
    if set(result.statuses) != {expected}:
        hint = ""
        if 429 in result.statuses:
            hint = f"; {RATE_LIMIT_HINT}"
        elif 404 in result.statuses:
            hint = "; does this server have the experience endpoints?"
        raise BenchError(
            f"{result.label} answered {result.statuses}, expected only {expected}{hint}"
        )


@dataclass
class Ours:
    """Our side's figures."""

    record_single: dict[str, Any] = field(default_factory=dict)
    record_batch: dict[str, Any] = field(default_factory=dict)
    recallable: dict[str, Any] = field(default_factory=dict)
    answers: Answers = field(default_factory=Answers)


def _posts(bodies: list[bytes], threads: int) -> RequestFactory:
    """Connection i sends bodies i, i + threads, i + 2 x threads, ..."""
    return lambda index, number: ("POST", "/experiences", bodies[number * threads + index])


def _record(
    arguments: argparse.Namespace, data: Data, user_id: str, ours: Ours, api_key: str
) -> float:
    """Both record loads; returns when the first one began (perf_counter)."""
    headers = {"X-API-Key": api_key, "Content-Type": "application/json"}
    threads, single, size = arguments.threads, arguments.single, arguments.batch_size
    rest = data.experiences[single:]
    loads = [
        (
            "record_single",
            "POST /experiences (single)",
            single,
            [
                json.dumps({"user_id": user_id, **body}).encode()
                for body in data.experiences[:single]
            ],
        ),
        (
            "record_batch",
            f"POST /experiences ({size} each)",
            len(rest),
            [
                json.dumps({"user_id": user_id, "experiences": rest[start : start + size]}).encode()
                for start in range(0, len(rest), size)
            ],
        ),
    ]
    began = time.perf_counter()
    for name, label, count, bodies in loads:
        if not bodies:
            continue
        result = run_load(
            label=label,
            base_url=arguments.base_url,
            headers=headers,
            threads=threads,
            requests_per_thread=len(bodies) // threads,
            request=_posts(bodies, threads),
        )
        print(result.line(), flush=True)
        _check_statuses(result, 201)
        setattr(
            ours,
            name,
            {
                "count": count,
                "requests": len(bodies),
                "seconds": result.seconds,
                "per_second": count / result.seconds,
                "p50_ms": result.percentile(0.5),
                "p95_ms": result.percentile(0.95),
            },
        )
    return began


def _wait_recallable(
    arguments: argparse.Namespace,
    client: KeepAliveClient,
    *,
    user_id: str,
    total: int,
    began: float,
    ours: Ours,
) -> None:
    """Poll the stats until every experience is stored and embedded."""
    last_change, last_pending = time.perf_counter(), None
    next_report = time.perf_counter() + PROGRESS_EVERY_SECONDS
    while True:
        stats = _stats(client, user_id)
        now = time.perf_counter()
        if EMBEDDING_PENDING_FIELD not in stats:
            missing = f"GET /experiences/stats has no {EMBEDDING_PENDING_FIELD!r}"
            ours.recallable = {"note": missing}
            print(f"note: {missing}: queries timed without waiting for embeddings", flush=True)
            return
        pending = int(stats[EMBEDDING_PENDING_FIELD])
        if int(stats.get("total", 0)) >= total and pending == 0:
            seconds = now - began
            ours.recallable = {"count": total, "seconds": seconds, "per_second": total / seconds}
            print(
                f"recallable: {total:,} experiences stored and embedded {seconds:.1f} s after the "
                f"first write -> {total / seconds:,.0f}/s",
                flush=True,
            )
            return
        if pending != last_pending:
            last_change, last_pending = now, pending
        elif now - last_change > arguments.stall_seconds:
            raise BenchError(
                f"{pending} experiences still waiting for embeddings after "
                f"{arguments.stall_seconds:.0f} s without progress: is the Celery worker running?"
            )
        if now >= next_report:
            print(f"  {now - began:7.1f} s  {pending:,} waiting for their embedding", flush=True)
            next_report = now + PROGRESS_EVERY_SECONDS
        time.sleep(arguments.poll_interval)


def _timed_get(client: KeepAliveClient, path: str, latency: Latency | None) -> dict[str, Any]:
    reply = client.exchange("GET", path)
    payload = reply.payload()
    if reply.status == 429:
        raise BenchError(RATE_LIMIT_HINT)
    if reply.status != 200 or not isinstance(payload, dict):
        raise BenchError(f"GET {path} answered {reply.status} {payload}")
    if latency is not None:
        header = reply.headers.get("Server-Timing") or ""
        timings = SERVER_TIMING.findall(header)
        latency.add(
            reply.elapsed_ms,
            {name: float(duration) for name, duration in timings},
            cached=EMBED_CACHED_MARK in header,
        )
    return payload


def _ours_ask(
    client: KeepAliveClient, user_id: str, op: str, query: str, latency: Latency | None
) -> Any:
    """Our server's answer to one recall (the tasks) or recommend (the action, None when it
    found none), as Mimir's child answers."""
    if op == "recall":
        path = "/experiences/recall?" + urlencode(
            {"user_id": user_id, "query": query, "k": RECALL_K}, quote_via=quote
        )
        payload = _timed_get(client, path, latency)
        return [str(result.get("task")) for result in payload.get("results", [])]
    path = "/experiences/recommend?" + urlencode(
        {"user_id": user_id, "task": query}, quote_via=quote
    )
    payload = _timed_get(client, path, latency)
    return payload.get("action") if payload.get("found") else None


# One side's way to ask: (op, query, the latency to time it into or None) -> its answer.
Ask = Callable[[str, str, Latency | None], Any]


def _warm(ask: Ask, _answers: Answers, query: str) -> None:
    ask("recall", query, None)
    ask("recommend", query, None)


def _recall(ask: Ask, answers: Answers, query: str) -> None:
    answers.recalled_tasks.append(ask("recall", query, answers.recall))


def _recommend(ask: Ask, answers: Answers, query: str) -> None:
    answers.recommended.append(ask("recommend", query, answers.recommend))


def _pair(ask: Ask, answers: Answers, query: str) -> None:
    ask("recall", query, answers.pair_recall)
    ask("recommend", query, answers.pair_recommend)


def queries_interleave(data: Data, sides: list[tuple[Ask, Answers]]) -> None:
    """Every query of the data asked of each side in turn, the side first to be asked
    alternating from query to query (see the module's docstring: warm-up, recall, recommend,
    one task both asked)."""
    turn = 0
    for label, step, queries in (
        ("warm-up", _warm, data.warmup),
        ("recall", _recall, data.recall_queries),
        ("recommend", _recommend, data.recommend_queries),
        ("one task, both asked", _pair, data.pair_queries),
    ):
        began = time.perf_counter()
        for query in queries:
            for ask, answers in sides if turn % 2 == 0 else sides[::-1]:
                step(ask, answers, query)
            turn += 1
        if queries:
            print(
                f"  {label}: {len(queries)} queries of {len(sides)} side(s) in "
                f"{time.perf_counter() - began:.1f} s",
                flush=True,
            )


def _user_delete(client: KeepAliveClient, user_id: str) -> None:
    try:
        status, payload = client.request("DELETE", f"/users/{quote(user_id, safe='')}")
        if status not in (200, 204):
            print(f"note: DELETE /users/{user_id} answered {status} {payload}", file=sys.stderr)
    except OSError as error:
        print(f"note: could not delete {user_id}: {error}", file=sys.stderr)


def bench_run(
    arguments: argparse.Namespace, data: Data, api_key: str, user_id: str
) -> tuple[Ours, dict[str, Any] | None, Answers | None]:
    """Our record phase, Mimir's (under ``--mimir-python``), then the queries of both
    interleaved; our figures, Mimir's record figures and its answers (None without it)."""
    ours = Ours()
    client = KeepAliveClient(arguments.base_url, api_key, timeout=120)
    try:
        _check_key(client)
        began = _record(arguments, data, user_id, ours, api_key)
        _wait_recallable(
            arguments, client, user_id=user_id, total=len(data.experiences), began=began, ours=ours
        )
        with contextlib.ExitStack() as stack:
            sides: list[tuple[Ask, Answers]] = [
                (functools.partial(_ours_ask, client, user_id), ours.answers)
            ]
            mimir_figures, mimir_answers = None, None
            if arguments.mimir_python:
                print(f"\nMimir under {arguments.mimir_python}:", flush=True)
                child = stack.enter_context(MimirChild(arguments, data))
                mimir_figures, mimir_answers = child.figures, Answers()
                sides.append((child.ask, mimir_answers))
            else:
                print("\nMimir: not run (no --mimir-python)")
            client.close()  # a fresh connection after the wait, warmed up by the warm-up queries
            print(
                "\nqueries"
                + (", ours and Mimir's interleaved query by query:" if len(sides) > 1 else ":"),
                flush=True,
            )
            queries_interleave(data, sides)
    finally:
        if not arguments.keep:
            _user_delete(client, user_id)
        client.close()
    return ours, mimir_figures, mimir_answers


# --- Report ---------------------------------------------------------------------------------


def _known(value: float | None) -> bool:
    return value is not None and not math.isnan(value)


def _ratio(numerator: float | None, denominator: float | None) -> str:
    if not (_known(numerator) and _known(denominator)) or not denominator:
        return "-"
    return f"{numerator / denominator:.2f}x"


def _value(value: float | None, unit: str) -> str:
    if not _known(value):
        return "-"
    return f"{value:,.0f} {unit}" if unit == "/s" else f"{value:.1f} {unit}"


def _figure(side: dict[str, Any] | None, *keys: str) -> Any:
    value: Any = side
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def report(
    ours: dict[str, Any], mimir: dict[str, Any] | None, goals: list[tuple[str, str]]
) -> list[str]:
    """The side-by-side table; ``ours`` and ``mimir`` as in the JSON document."""
    rows: list[tuple[str, float | None, float | None, str, str]] = []
    for label, our_keys, mimir_keys in (
        (
            "record single, 4 threads",
            ("record_single", "per_second"),
            ("record_single", "per_second"),
        ),
        ("record batch / bulk", ("record_batch", "per_second"), ("record_bulk", "per_second")),
        ("write to recallable", ("recallable", "per_second"), ("recallable", "per_second")),
    ):
        ours_value, mimir_value = _figure(ours, *our_keys), _figure(mimir, *mimir_keys)
        rows.append((label, ours_value, mimir_value, "/s", _ratio(ours_value, mimir_value)))
    for keys, name in (
        (("recall",), "recall (k=5)"),
        (("recommend",), "recommend"),
        (("pairs", "recommend"), "one task: recommend"),
    ):
        for statistic in ("p50_ms", "p95_ms", "mean_ms"):
            ours_value = _figure(ours, *keys, statistic)
            mimir_value = _figure(mimir, *keys, statistic)
            label = f"{name} {statistic.split('_')[0]}"
            rows.append((label, ours_value, mimir_value, "ms", _ratio(mimir_value, ours_value)))
    lines = [
        f"{'':<28} {'ours (HTTP)':>14} {'Mimir (in-process)':>19} {'ratio':>8}",
    ]
    for label, ours_value, mimir_value, unit, ratio in rows:
        lines.append(
            f"{label:<28} {_value(ours_value, unit):>14} {_value(mimir_value, unit):>19} {ratio:>8}"
        )
    lines.append(
        "ratio: ours / Mimir's for throughput, Mimir's / ours for latency (above 1: ours better)"
    )
    for kind in ("recall", "recommend"):
        summary = _figure(ours, kind) or {}
        cached, total = summary.get("embed_cached", 0), summary.get("n", 0)
        if cached:
            everything = summary["all"]
            lines.append(
                f"{kind}: {cached} of {total} queries' embeddings were read from the server's "
                f"cache (no model run), left out of both sides' "
                f"figures above; ours over all {total}: p50 {everything['p50_ms']:.1f} / p95 "
                f"{everything['p95_ms']:.1f} ms"
            )
        else:
            lines.append(f"{kind}: all {total} queries ran the model (none read from the cache)")
        timing = summary.get("server_timing") or {}
        if timing:
            entries = ", ".join(
                f"{name} {values['p50_ms']:.1f} / {values['p95_ms']:.1f}"
                for name, values in timing.items()
            )
            lines.append(f"  Server-Timing p50 / p95 ms: {entries}")
        else:
            lines.append("  no Server-Timing header")
    pairs = _figure(ours, "pairs") or {}
    if pairs.get("recommend", {}).get("n"):
        recall, recommend = pairs["recall"], pairs["recommend"]
        mimir_recall = _figure(mimir, "pairs", "recall", "p50_ms")
        lines.append(
            f"one task, both asked: {recommend['n']} more queries, each asked as recall then "
            "recommend of the same text by one side, then the other; our recommend reads the "
            f"query's embedding from the cache its recall filled, a cache hit by design "
            f"({recommend['embed_cached']} of {recommend['n']} did); Mimir's recommend embeds "
            "nothing (keyword matches only). "
            f"Their recall p50: ours {_value(recall['p50_ms'], 'ms')}, Mimir's "
            f"{_value(mimir_recall, 'ms')}"
        )
    for label, side in (("ours", ours), ("Mimir", mimir)):
        quality = _figure(side, "quality")
        if quality:
            lines.append(
                f"{label:<5} same task@5 {quality['same_task_at_5']:.3f}, best action "
                f"{quality['best_action']:.3f} (of the queries naming a subject: "
                f"{quality['recall_queries_naming_a_subject']} recall, "
                f"{quality['recommend_queries_naming_a_subject']} recommend), recommend found "
                f"{quality['recommend_found']:.3f}"
            )
    lines.extend(f"goal, {goal}: {met}" for goal, met in goals)
    return lines


def goals_check(ours: dict[str, Any], mimir: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The issue's goals; latency over the queries our server ran its model for, ratios
    against Mimir's times of the same queries, asked in the same interleaved run."""

    def get(*keys: str) -> float:
        value = _figure(ours, *keys)
        return math.nan if value is None else value

    def against_mimir(kind: str, goal: float) -> tuple[str, str]:
        label = f"{kind} p50 >= {goal:g}x Mimir's in-process"
        if mimir is None:
            return label, "not measured (no --mimir-python)"
        ours_value, mimir_value = get(kind, "p50_ms"), _figure(mimir, kind, "p50_ms")
        ratio = _ratio(mimir_value, ours_value)
        met = ratio != "-" and mimir_value / ours_value >= goal
        return label, f"{verdict(met)} ({ratio})"

    return [
        (
            f"recommend p50 <= {GOAL_RECOMMEND_P50_MS:.0f} ms",
            verdict(get("recommend", "p50_ms") <= GOAL_RECOMMEND_P50_MS),
        ),
        (
            f"recommend p95 <= {GOAL_RECOMMEND_P95_MS:.0f} ms",
            verdict(get("recommend", "p95_ms") <= GOAL_RECOMMEND_P95_MS),
        ),
        against_mimir("recommend", GOAL_RECOMMEND_RATIO),
        (
            f"recall p50 <= {GOAL_RECALL_P50_MS:.0f} ms",
            verdict(get("recall", "p50_ms") <= GOAL_RECALL_P50_MS),
        ),
        against_mimir("recall", GOAL_RECALL_RATIO),
        (
            f"record single >= {GOAL_RECORD_SINGLE_PER_SECOND:,.0f}/s",
            verdict(get("record_single", "per_second") >= GOAL_RECORD_SINGLE_PER_SECOND),
        ),
    ]


# --- The run --------------------------------------------------------------------------------


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    server_arguments(parser)
    parser.add_argument("--experiences", type=int, default=10_000)
    parser.add_argument("--single", type=int, default=2000, help="of them recorded one by one")
    parser.add_argument("--batch-size", type=int, default=500, help="the rest, in batches of this")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20, help="unmeasured queries first")
    parser.add_argument(
        "--pairs",
        type=int,
        default=None,
        help="queries asked as recall then recommend of the same text (default: half of --queries)",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--mimir-python", default=None, help="python of a virtualenv with mimir-learn==0.1.5"
    )
    parser.add_argument(
        "--mimir-embeddings",
        choices=["auto", "model", "none"],
        default="auto",
        help="model: Mimir embeds with the local all-MiniLM-L6-v2 (needs sentence-transformers "
        "in its virtualenv); none: keyword only; auto: model when it imports",
    )
    parser.add_argument("--torch-threads", type=int, default=2, help="Mimir's model threads")
    parser.add_argument("--poll-interval", type=float, default=0.5, help="seconds")
    parser.add_argument("--stall-seconds", type=float, default=300.0)
    parser.add_argument("--keep", action="store_true", help="keep the bench's user")
    parser.add_argument("--json-out", type=Path, default=None)
    arguments = arguments_parse(parser, argv, smoke=SMOKE)
    rest = arguments.experiences - arguments.single
    if not 0 <= arguments.single <= arguments.experiences or arguments.threads < 1:
        parser.error("need 0 <= --single <= --experiences and --threads >= 1")
    if arguments.single % arguments.threads or rest % (arguments.threads * arguments.batch_size):
        parser.error(
            "--single must be a multiple of --threads, and --experiences - --single of "
            "--threads x --batch-size (every connection sends as many)"
        )
    if not 1 <= arguments.batch_size <= 1000 or arguments.queries < 1:
        parser.error("--batch-size is 1 to 1000 (the API's limit); --queries at least 1")
    # Half: a p95 from the 8th slowest of 150, enough for a figure reported beside the main
    # ones, for a quarter of the query phase's time more.
    if arguments.pairs is None:
        arguments.pairs = arguments.queries // 2
    if arguments.pairs < 0:
        parser.error("--pairs is 0 or more")
    return arguments


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--mimir-child"]:
        return mimir_child(Path(argv[1]))
    arguments = _arguments(argv)
    start = run_start("bench.experiences", argv)
    started_at, load_at_start, command = start.at, start.load, start.command
    run = f"{started_at:%Y%m%d-%H%M%S}"
    data = data_generate(
        experiences=arguments.experiences,
        queries=arguments.queries,
        warmup=arguments.warmup,
        seed=arguments.seed,
        query_seed=f"{arguments.seed}:{run}",
        pair_queries=arguments.pairs,
    )
    user_id = f"exbench-{run}"
    outcomes = {
        outcome: sum(body["outcome"] == outcome for body in data.experiences)
        for outcome, _share in OUTCOME_SHARES
    }
    print(
        f"{len(data.experiences):,} experiences ({len(data.pair_of_task):,} distinct tasks; "
        f"{outcomes}), {len(data.recall_queries)} recall and {len(data.recommend_queries)} "
        f"recommend queries + {len(data.warmup)} warm-up + {len(data.pair_queries)} asked of "
        f"both for one task (drawn for this run), seed "
        f"{arguments.seed}; user {user_id} at {arguments.base_url}",
        flush=True,
    )
    try:
        api_key = api_key_read(arguments)
        ours, mimir, mimir_answers = bench_run(arguments, data, api_key, user_id)
    except BenchError as error:
        print(error, file=sys.stderr)
        return 1
    except OSError as error:
        print(f"{arguments.base_url}: {error} (is the server running?)", file=sys.stderr)
        return 1

    ours_document: dict[str, Any] = {
        "record_single": ours.record_single,
        "record_batch": ours.record_batch,
        "recallable": ours.recallable,
        **ours.answers.summary(data),
    }
    if mimir is not None and mimir_answers is not None:
        # Over the same queries as ours: those our server ran its model for.
        mimir |= mimir_answers.summary(data, left_out=ours.answers)
    goals = goals_check(ours_document, mimir)
    load_at_end = load_average()
    print()
    if mimir is not None:
        bulk = mimir["record_bulk"]
        print(
            f"Mimir {mimir['version']}: embeddings {mimir['embeddings']}, vector index "
            f"{mimir['vector_index']}; bulk = write() of pre-embedded experiences (embedding "
            f"{bulk['embed_seconds']:.1f} s of {bulk['seconds']:.1f} s)"
        )
    for line in report(ours_document, mimir, goals):
        print(line)
    print(f"load average at end (1/5/15 min): {load_at_end}")
    if arguments.json_out is not None:
        document = {
            "date": started_at.isoformat(),
            "command": command,
            "load_average": {"start": load_at_start, "end": load_at_end},
            "base_url": arguments.base_url,
            "user_id": user_id,
            "data": {
                "experiences": len(data.experiences),
                "outcomes": outcomes,
                "queries": len(data.recall_queries),
                "warmup": len(data.warmup),
                "pairs": len(data.pair_queries),
                "seed": arguments.seed,
            },
            "threads": arguments.threads,
            "ours": ours_document,
            "mimir": mimir,
            "goals": dict(goals),
        }
        arguments.json_out.write_text(json.dumps(document, indent=1) + "\n")
        print(f"figures written to {arguments.json_out}")
    if arguments.smoke:
        print(SMOKE_NOTE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
