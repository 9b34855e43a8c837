"""Embedding providers: turn texts into vectors for memory search.

Memories are embedded when they are extracted and queries when they are searched. Vectors of
different models are never comparable, so every provider exposes ``model_name``, the label stored
beside each vector it produces, and guarantees that every vector has exactly ``dimensions`` floats
and unit length (so cosine distance and inner product rank alike, whichever the search uses).

Providers never retry: they raise ``EmbeddingTransientError`` for failures worth retrying later and
``EmbeddingPermanentError`` for the rest, and the Celery task that called them decides.
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import quote

import numpy as np
import requests

from mirix_site.providers.chunking import chunk_text
from mirix_site.providers.http import post_json_object
from mirix_site.providers.local_model import LocalModel, local_model_load

__all__ = [
    "LOCAL_MODEL_DIMENSIONS",
    "LOCAL_MODEL_NAME",
    "EmbeddingError",
    "EmbeddingPermanentError",
    "EmbeddingProvider",
    "EmbeddingSettings",
    "EmbeddingTransientError",
    "GeminiEmbeddingProvider",
    "LocalEmbeddingProvider",
    "OpenAIEmbeddingProvider",
    "embedding_provider",
    "embedding_provider_from_settings",
]

# The default embedding model (EMBEDDING_MODEL), bundled offline; settings read it from here.
LOCAL_MODEL_NAME = "all-MiniLM-L6-v2"
LOCAL_MODEL_DIMENSIONS = 384

# Native output sizes. Only the text-embedding-3 models accept a smaller "dimensions".
OPENAI_MODEL_DIMENSIONS: dict[str, int] = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
# gemini-embedding-001 natively returns 3072 floats; we ask for 768 (its recommended smaller size,
# same as text-embedding-004) to keep rows and indexes small.
GEMINI_MODEL_DIMENSIONS: dict[str, int] = {
    "text-embedding-004": 768,
    "gemini-embedding-001": 768,
}

# Remote models have no local tokenizer. Three UTF-8 bytes per token over-counts English
# (about four characters per token) and counts a CJK character, three bytes, as one token, which
# is roughly what these tokenizers do; counting characters instead would under-count CJK threefold.
_ESTIMATED_BYTES_PER_TOKEN = 3
# Well inside both services' per-input limits (OpenAI 8,192 tokens, Gemini 2,048) once the
# estimate above errs, and long enough that a memory rarely needs more than one chunk.
_REMOTE_MAX_CHUNK_TOKENS = 2048


def unit_rows(matrix: Any) -> np.ndarray:
    """Each row of ``matrix`` (its last axis) scaled to length 1; a zero row stays zero."""
    array = np.asarray(matrix, dtype=float)
    return array / np.maximum(np.linalg.norm(array, axis=-1, keepdims=True), 1e-12)


def cosines(left: Any, right: Any) -> np.ndarray:
    """The cosine similarity of every row of ``left`` with every row of ``right``."""
    return unit_rows(left) @ unit_rows(right).T


class EmbeddingError(Exception):
    """An embedding request failed; no vector was produced."""


class EmbeddingTransientError(EmbeddingError):
    """A failure that may pass: a timeout, a dropped connection, a rate limit, a 5xx (the list
    is ``mirix_site.providers.http.TRANSIENT_HTTP_STATUSES``). Retry later."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        # Seconds the server asked us to wait (Retry-After), for the retrying task's countdown.
        self.retry_after = retry_after


class EmbeddingPermanentError(EmbeddingError):
    """A failure that retrying will not fix: other 4xx, malformed response, wrong vector size."""


@dataclass(frozen=True)
class EmbeddingSettings:
    """Which embedding model to use and how to reach it."""

    provider: str  # "local" | "openai" | "gemini"
    model: str
    api_base: str | None = None
    # Kept out of repr so that logging the settings (or a task's arguments) never shows the key.
    api_key: str | None = field(default=None, repr=False)
    # Required for remote models missing from the tables above.
    dimensions: int | None = None
    timeout: float = 30.0


class EmbeddingProvider(ABC):
    """One embedding model. Subclasses set ``model_name`` and ``dimensions`` in ``__init__``."""

    model_name: str  # the label stored beside every vector
    dimensions: int

    @property
    @abstractmethod
    def max_chunk_tokens(self) -> int:
        """The most tokens one chunk may hold, so the model reads all of it."""

    @abstractmethod
    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text, in the same order; ``[]`` for no texts.

        Texts longer than ``max_chunk_tokens`` are not split here (the model may truncate or
        reject them): call ``chunk()`` first.
        """

    @abstractmethod
    def count_tokens(self, text: str) -> int:
        """Tokens the model sees for ``text``, without special tokens.

        Exact where the model's tokenizer is at hand, else a deliberately high estimate.
        """

    def chunk(self, text: str) -> list[str]:
        """Split ``text`` into chunks of at most ``max_chunk_tokens`` tokens each, cut at
        paragraphs, else sentences, else words (``mirix_site.providers.chunking.chunk_text``).

        A text that fits is its own only chunk, so ``""`` gives ``[""]``: every text has at
        least one.
        """
        return chunk_text(text, count_tokens=self.count_tokens, max_tokens=self.max_chunk_tokens)


# --- Local: all-MiniLM-L6-v2 on the CPU -------------------------------------------------------


class _SharedLocalModel:
    """The process's one copy of the local model (about 90 MB), loaded on first use.

    Gunicorn threads and Celery tasks in one process share it. Loading lazily rather than at
    import keeps start-up fast and keeps the runtime's threads out of a pre-fork parent, whose
    thread pool would not survive the fork.
    """

    def __init__(self) -> None:
        self._model: LocalModel | None = None
        self._load_lock = threading.Lock()

    def get(self) -> LocalModel:
        model = self._model
        if model is None:
            with self._load_lock:
                if self._model is None:
                    from django.conf import settings

                    self._model = local_model_load(
                        settings.LOCAL_MODEL_DIR, threads=settings.EMBEDDING_THREADS
                    )
                model = self._model
        return model


_shared_local_model = _SharedLocalModel()


class LocalEmbeddingProvider(EmbeddingProvider):
    """all-MiniLM-L6-v2 on the CPU, offline (``mirix_site.providers.local_model``)."""

    # Texts per forward pass: as many as fit _BATCH_TOKENS tokens once padded to the batch's
    # longest, at most _BATCH_SIZE. A fixed count lost on long texts, whose padding and
    # attention cost more than batching saves; a budget keeps long texts alone and batches
    # short ones, which gain most (bench/embedding_runtime; bench/RESULTS.md).
    _BATCH_SIZE = 64
    _BATCH_TOKENS = 256

    def __init__(self, settings: EmbeddingSettings) -> None:
        if settings.model != LOCAL_MODEL_NAME:
            raise ValueError(
                f"The local embedding provider only runs {LOCAL_MODEL_NAME!r}, "
                f"not {settings.model!r}."
            )
        if settings.dimensions not in (None, LOCAL_MODEL_DIMENSIONS):
            raise ValueError(
                f"{LOCAL_MODEL_NAME} produces {LOCAL_MODEL_DIMENSIONS} dimensions, "
                f"not {settings.dimensions}."
            )
        self.model_name = LOCAL_MODEL_NAME
        self.dimensions = LOCAL_MODEL_DIMENSIONS

    @property
    def model(self) -> LocalModel:
        """The loaded model, shared by every local provider in this process."""
        return _shared_local_model.get()

    @property
    def max_chunk_tokens(self) -> int:
        model = self.model
        # The model reads max_seq_length tokens (256) including [CLS] and [SEP], and silently
        # drops the rest, so a chunk's own tokens must leave room for those two.
        return model.max_seq_length - model.special_tokens

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors: list[list[float]] = self.model.embed(
            list(texts), batch_size=self._BATCH_SIZE, batch_tokens=self._BATCH_TOKENS
        ).tolist()
        for vector in vectors:
            _check_size(vector, self.dimensions, LOCAL_MODEL_NAME)
        return vectors

    def chunk(self, text: str) -> list[str]:
        # WordPiece never makes more tokens of a text than it has characters: a text no longer
        # than a chunk is one, without running the tokenizer (a skill's task phrasings, most
        # turns).
        if len(text) <= self.max_chunk_tokens:
            return [text]
        return super().chunk(text)

    def count_tokens(self, text: str) -> int:
        return self.model.count_tokens(text)


# --- Remote providers -------------------------------------------------------------------------


class _RemoteEmbeddingProvider(EmbeddingProvider):
    """An embedding model behind an HTTP API: batching, error mapping and vector checks."""

    max_chunk_tokens = _REMOTE_MAX_CHUNK_TOKENS
    _service: ClassVar[str]  # for error messages
    _max_batch_inputs: ClassVar[int]
    _max_batch_tokens: ClassVar[int | None] = None

    def __init__(self, settings: EmbeddingSettings, known_dimensions: dict[str, int]) -> None:
        dimensions = settings.dimensions or known_dimensions.get(settings.model)
        if dimensions is None:
            raise ValueError(
                f"Unknown {self._service} embedding model {settings.model!r}: "
                "its dimensions must be configured."
            )
        if dimensions <= 0:
            raise ValueError(f"Embedding dimensions must be positive, not {dimensions}.")
        self.model_name = settings.model
        self.dimensions = dimensions
        self._api_key = settings.api_key or None
        self._timeout = settings.timeout
        # One session per provider reuses connections (TLS set-up dominates small requests).
        self._session = requests.Session()

    def count_tokens(self, text: str) -> int:
        return math.ceil(len(text.encode("utf-8")) / _ESTIMATED_BYTES_PER_TOKEN)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for batch in _batches(
            texts,
            max_inputs=self._max_batch_inputs,
            max_tokens=self._max_batch_tokens,
            count_tokens=self.count_tokens,
        ):
            vectors += self._embed_batch(batch)
        return vectors

    @abstractmethod
    def _embed_batch(self, texts: list[str]) -> list[list[float]]: ...

    def _post_json(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        return post_json_object(
            self._session,
            url,
            body=body,
            timeout=self._timeout,
            label=f"{self._service} embeddings",
            api_key=self._api_key,
            transient_error=EmbeddingTransientError,
            permanent_error=EmbeddingPermanentError,
        )

    def _vector(self, values: Any) -> list[float]:
        """A checked, unit-length copy of one vector from the response."""
        where = f"{self._service} model {self.model_name}"
        if not isinstance(values, list) or not all(
            isinstance(value, int | float) and not isinstance(value, bool) for value in values
        ):
            raise EmbeddingPermanentError(
                f"{where} returned a vector that is not a list of numbers."
            )
        _check_size(values, self.dimensions, where)
        norm = math.sqrt(math.fsum(float(value) ** 2 for value in values))
        # A NaN or infinite component, or an all-zero vector, matches nothing meaningfully and
        # pgvector refuses NaN: never store one.
        if not math.isfinite(norm) or norm == 0:
            raise EmbeddingPermanentError(f"{where} returned a zero or non-finite vector.")
        # OpenAI's vectors are already unit length; Gemini's are not when shortened below 3072,
        # nor are those of some OpenAI-compatible servers.
        return [float(value) / norm for value in values]


class OpenAIEmbeddingProvider(_RemoteEmbeddingProvider):
    """OpenAI's /embeddings API, or any server that speaks it (vLLM, Ollama, llama.cpp)."""

    _service = "OpenAI"
    _max_batch_inputs = 256
    # OpenAI refuses a request whose inputs add up to more than 300,000 tokens; 256 chunks of
    # 2,048 would. The estimate over-counts English, so this budget keeps under the limit.
    _max_batch_tokens = 300_000

    def __init__(self, settings: EmbeddingSettings) -> None:
        super().__init__(settings, OPENAI_MODEL_DIMENSIONS)
        self._url = f"{(settings.api_base or 'https://api.openai.com/v1').rstrip('/')}/embeddings"
        native = OPENAI_MODEL_DIMENSIONS.get(settings.model)
        # Ask for a size only where the model has one to shorten; other servers may reject the
        # field, and for them the configured size is only what we expect back.
        self._requested_dimensions = (
            self.dimensions if native is not None and self.dimensions != native else None
        )
        if self._api_key:
            self._session.headers["Authorization"] = f"Bearer {self._api_key}"

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.model_name, "input": texts}
        if self._requested_dimensions is not None:
            body["dimensions"] = self._requested_dimensions
        payload = self._post_json(self._url, body)
        data = payload.get("data")
        if not isinstance(data, list) or len(data) != len(texts):
            raise EmbeddingPermanentError(
                f"OpenAI embeddings answered without one item of 'data' per input "
                f"({len(texts)} sent)."
            )
        # The API documents no order for "data"; each item names its input by "index".
        by_index: dict[int, list[float]] = {}
        for item in data:
            index = item.get("index") if isinstance(item, dict) else None
            if not isinstance(index, int) or not 0 <= index < len(texts) or index in by_index:
                raise EmbeddingPermanentError(
                    "OpenAI embeddings answered with a missing, repeated or out-of-range index."
                )
            by_index[index] = self._vector(item.get("embedding"))
        return [by_index[index] for index in range(len(texts))]


class GeminiEmbeddingProvider(_RemoteEmbeddingProvider):
    """Google's Gemini API (generativelanguage.googleapis.com), batchEmbedContents."""

    _service = "Gemini"
    _max_batch_inputs = 100  # the API's limit on requests per batch

    def __init__(self, settings: EmbeddingSettings) -> None:
        super().__init__(settings, GEMINI_MODEL_DIMENSIONS)
        base = (settings.api_base or "https://generativelanguage.googleapis.com").rstrip("/")
        self._url = f"{base}/v1beta/models/{quote(settings.model, safe='')}:batchEmbedContents"
        if self._api_key:
            # A header rather than "?key=": URLs end up in logs and exception messages.
            self._session.headers["x-goog-api-key"] = self._api_key

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        body = {
            "requests": [
                {
                    "model": f"models/{self.model_name}",
                    "content": {"parts": [{"text": text}]},
                    "outputDimensionality": self.dimensions,
                }
                for text in texts
            ]
        }
        payload = self._post_json(self._url, body)
        embeddings = payload.get("embeddings")
        if not isinstance(embeddings, list) or len(embeddings) != len(texts):
            raise EmbeddingPermanentError(
                f"Gemini embeddings answered without one embedding per input ({len(texts)} sent)."
            )
        # Gemini answers in request order; there is no index to sort by.
        return [
            self._vector(embedding.get("values") if isinstance(embedding, dict) else None)
            for embedding in embeddings
        ]


def _batches(
    texts: Sequence[str],
    *,
    max_inputs: int,
    max_tokens: int | None,
    count_tokens: Callable[[str], int],
) -> Iterator[list[str]]:
    batch: list[str] = []
    batch_tokens = 0
    for text in texts:
        tokens = count_tokens(text) if max_tokens is not None else 0
        over_budget = max_tokens is not None and batch_tokens + tokens > max_tokens
        if batch and (len(batch) == max_inputs or over_budget):
            yield batch
            batch, batch_tokens = [], 0
        batch.append(text)
        batch_tokens += tokens
    if batch:
        yield batch


def _check_size(vector: Sequence[float], dimensions: int, where: str) -> None:
    # A vector of the wrong size must never be stored: it cannot be compared with the others.
    if len(vector) != dimensions:
        raise EmbeddingPermanentError(
            f"{where} returned {len(vector)} dimensions instead of {dimensions}."
        )


# --- Choosing a provider -----------------------------------------------------------------------

_PROVIDERS: dict[str, Callable[[EmbeddingSettings], EmbeddingProvider]] = {
    "local": LocalEmbeddingProvider,
    "openai": OpenAIEmbeddingProvider,
    "gemini": GeminiEmbeddingProvider,
}


def embedding_provider(settings: EmbeddingSettings) -> EmbeddingProvider:
    """The provider ``settings`` describe. Local providers share one loaded model per process."""
    factory = _PROVIDERS.get(settings.provider)
    if factory is None:
        raise ValueError(
            f"Unknown embedding provider {settings.provider!r}; "
            f"expected one of {', '.join(sorted(_PROVIDERS))}."
        )
    return factory(settings)


def embedding_provider_from_settings() -> EmbeddingProvider:
    """The provider configured by EMBEDDING_PROVIDER, EMBEDDING_MODEL, EMBEDDING_DIMENSIONS,
    EMBEDDING_API_BASE and EMBEDDING_API_KEY."""
    from django.conf import settings

    return embedding_provider(
        EmbeddingSettings(
            provider=settings.EMBEDDING_PROVIDER,
            model=settings.EMBEDDING_MODEL,
            api_base=settings.EMBEDDING_API_BASE or None,
            api_key=settings.EMBEDDING_API_KEY or None,
            dimensions=settings.EMBEDDING_DIMENSIONS,
        )
    )
