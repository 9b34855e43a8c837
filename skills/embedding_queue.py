"""The queue of experiences waiting for their embeddings: one Redis list, drained in batches.

A Celery message per recorded experience cost each request a publish (~3 ms of a 10 ms
single record, bench/experiences.py) and the worker one model run per row. Instead a commit
appends its ids to ``QUEUE`` and, in the same round trip, tries to set ``DRAINING``; only the
push that sets it publishes a drain task, which embeds the list a batch at a time until it
is empty, so a burst of a thousand single records is one task and a few model runs.

Nothing here raises for an unreachable Redis or broker: the beat sweep
(``embed_pending_experiences``) embeds whatever waited longer than two minutes, as it does
for a drain that died with a batch in hand.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import redis
from kombu.exceptions import OperationalError

from memory.providers.embeddings import EmbeddingProvider
from mirix_site.redis import redis_client
from skills.services.experiences import experiences_embed

logger = logging.getLogger(__name__)

QUEUE = "mirix:experiences-to-embed"
# Set while a drain task is queued or running. It expires, so a drain whose message was lost
# (or whose worker died) stops holding the queue after a minute: the next push starts one.
DRAINING = "mirix:experiences-embed-draining"
DRAINING_SECONDS = 60
# Rows a batch embeds, and batches a task runs before it hands the rest to a new message
# (the worker takes extraction jobs in between).
BATCH = 200
BATCHES_PER_TASK = 10


def experiences_embed_soon(experience_ids: Sequence[int]) -> None:
    """Queue these committed experiences for embedding, starting a drain if none runs."""
    from skills.tasks import experiences_embed_drain_task

    if not experience_ids:
        return
    client = redis_client()
    try:
        pipeline = client.pipeline(transaction=False)
        pipeline.rpush(QUEUE, *experience_ids)
        pipeline.set(DRAINING, 1, nx=True, ex=DRAINING_SECONDS)
        _, started = pipeline.execute()
        if started:
            try:
                experiences_embed_drain_task.delay()
            except OperationalError:
                client.delete(DRAINING)  # the next push tries again
                raise
    except (redis.RedisError, OperationalError) as error:
        logger.warning(
            "%s experiences not queued for embedding (%s): the sweep embeds them",
            len(experience_ids),
            error,
        )


def experiences_embed_drain(*, embedders: Sequence[EmbeddingProvider]) -> tuple[int, bool]:
    """Embed queued experiences, ``BATCH`` at a time, until the queue is empty or
    ``BATCHES_PER_TASK`` ran. Returns how many were embedded and whether more wait (the
    caller publishes the next drain; ``DRAINING`` stays set for it). A batch whose embedding
    fails goes back to the head of the queue before the error propagates."""
    client = redis_client()
    embedded = 0
    for _ in range(BATCHES_PER_TASK):
        client.expire(DRAINING, DRAINING_SECONDS)
        popped = client.lpop(QUEUE, BATCH)
        if not popped:
            client.delete(DRAINING)
            # A push between the empty pop and the delete found the flag set and published
            # nothing: this drain takes its ids, unless a later push started another.
            if client.llen(QUEUE) and client.set(DRAINING, 1, nx=True, ex=DRAINING_SECONDS):
                continue
            return embedded, False
        ids = sorted({int(value) for value in popped})
        try:
            embedded += experiences_embed(experience_ids=ids, embedders=embedders)
        except Exception:
            client.lpush(QUEUE, *ids)
            raise
    return embedded, True
