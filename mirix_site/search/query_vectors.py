"""Query embeddings, cached in Redis per (model, text): the same question asked again (a
client retrying, the same topic from several users) costs no model run."""

from __future__ import annotations

import hashlib
import logging
import time
from array import array
from dataclasses import dataclass
from functools import partial

import redis

from mirix_site.common.redis import redis_client
from mirix_site.providers.embeddings import EmbeddingProvider
from mirix_site.search.lanes import Lane

logger = logging.getLogger(__name__)

CACHE_SECONDS = 24 * 3600


def _key(model: str, text: str) -> str:
    return f"mirix:qvec:{model}:{hashlib.sha256(text.encode()).hexdigest()}"


# Embeddings started ahead of the search that reads them, by (model, text): an endpoint whose
# search text is its query parameter starts it once the parameters are valid, so the reads it
# makes before searching (the end user, the client's settings, the scope) run beside the model.
# Per process; the oldest is dropped past MAX_STARTED (a request that failed after starting).
MAX_STARTED = 32


@dataclass(frozen=True)
class QueryVector:
    vector: list[float]
    ms: float  # the model run's own time (or the cache read's)
    ready_at: float  # time.perf_counter() when it was made
    cached: bool = False  # read from the cache, not made by the model


_started: dict[tuple[str, str], Lane[QueryVector]] = {}


def query_vector_start(text: str, embedder: EmbeddingProvider) -> None:
    """Start embedding ``text`` in the lane pool; the next ``query_vector_lane`` of it takes
    it."""
    key = (embedder.model_name, text)
    if not text.strip() or key in _started:
        return
    while len(_started) >= MAX_STARTED:
        _started.pop(next(iter(_started)), None)
    _started[key] = Lane(partial(_query_vector, text, embedder), beside=True)


def query_vector_lane(text: str, embedder: EmbeddingProvider, *, beside: bool) -> Lane[QueryVector]:
    """The query's embedding (of its first chunk: a question longer than the model's window
    is rare, and its opening says what it is about), as a lane to join: the one started for
    it, else one started now (``beside``: in the lane pool)."""
    started = _started.pop((embedder.model_name, text), None)
    if started is not None:
        return started
    return Lane(partial(_query_vector, text, embedder), beside=beside)


def _query_vector(text: str, embedder: EmbeddingProvider) -> QueryVector:
    began = time.perf_counter()
    key = _key(embedder.model_name, text)
    try:
        cached = redis_client().get(key)
    except redis.RedisError:
        cached = None
    if cached:
        vector = array("f", cached).tolist()
    else:
        chunks = embedder.chunk(text) or [text]
        vector = embedder.embed([chunks[0]])[0]
        try:
            redis_client().set(key, array("f", vector).tobytes(), ex=CACHE_SECONDS)
        except redis.RedisError:
            logger.info("Redis unreachable: query embedding not cached")
    ready = time.perf_counter()
    return QueryVector(vector, (ready - began) * 1000, ready, cached=bool(cached))
