"""Query embeddings, cached in Redis per (model, text): the same question asked again (a
client retrying, the same topic from several users) costs no model run."""

from __future__ import annotations

import hashlib
import logging
from array import array

import redis

from memory.providers.embeddings import EmbeddingProvider
from mirix_site.redis import redis_client

logger = logging.getLogger(__name__)

CACHE_SECONDS = 24 * 3600


def _key(model: str, text: str) -> str:
    return f"mirix:qvec:{model}:{hashlib.sha256(text.encode()).hexdigest()}"


def query_vector(text: str, embedder: EmbeddingProvider) -> list[float]:
    """The query's embedding (of its first chunk: a question longer than the model's window
    is rare, and its opening says what it is about)."""
    key = _key(embedder.model_name, text)
    try:
        cached = redis_client().get(key)
    except redis.RedisError:
        cached = None
    if cached:
        return array("f", cached).tolist()
    chunks = embedder.chunk(text) or [text]
    vector = embedder.embed([chunks[0]])[0]
    try:
        redis_client().set(key, array("f", vector).tobytes(), ex=CACHE_SECONDS)
    except redis.RedisError:
        logger.info("Redis unreachable: query embedding not cached")
    return vector
