"""The embedding of experiences: what embeds them (``experiences_embed``), the beat sweep's
choice (``experiences_unembedded``), and the queue of those waiting, one Redis list drained in
batches.

A Celery message per recorded experience cost each request a publish (~3 ms of a 10 ms
single record, bench/experiences.py) and the worker one model run per row. Instead a commit
appends its ids to ``QUEUE`` and, in the same round trip, tries to set ``DRAINING``; only the
push that sets it publishes a drain task, which embeds the list a batch at a time until it
is empty, so a burst of a thousand single records is one task and a few model runs. A drain
that finds more than a batch waiting starts others beside it, up to ``EXPERIENCE_EMBED_DRAINS``
(the worker's processes): the model runs on one core a process, and one drain alone embedded
10,000 experiences at 59/s where a task per record had both processes at 78-92/s. Drains yield
to a burst of records (``RECORDING``): embedding waits for the writes to pause.

Nothing here raises for an unreachable Redis or broker: the beat sweep
(``embed_pending_experiences``) embeds whatever waited longer than two minutes, as it does
for a drain that died with a batch in hand.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import timedelta

import redis
from django.conf import settings
from django.utils import timezone
from kombu.exceptions import OperationalError

from mirix_site.common.database import database_unreachable
from mirix_site.common.publish import task_publish
from mirix_site.common.redis import redis_client
from mirix_site.providers.embeddings import EmbeddingProvider, EmbeddingTransientError
from mirix_site.search.index import embeddings_write_committed
from skills.models import Experience
from skills.search import EXPERIENCE_KIND
from skills.services.grouping import action_phrases_assign

logger = logging.getLogger(__name__)

QUEUE = "mirix:experiences-to-embed"
# The drain task (``skills.tasks``), queued by its name.
DRAIN_TASK = "skills.tasks.experiences_embed_drain_task"
# One flag per drain slot, set while a drain task holds the slot (queued or running). It
# expires, so a drain whose message was lost (or whose worker died) stops holding its slot
# after a minute. Pushes start slot 0; a busy drain starts the others.
DRAINING = "mirix:experiences-embed-draining:{slot}"
DRAINING_SECONDS = 60
# Rows a batch embeds, and batches a task runs before it hands the rest to a new message
# (the worker takes extraction jobs in between): about 10 s of model time.
BATCH = 200
BATCHES_PER_TASK = 5
# Set by every push for a second: records are arriving. A drain waits for a second without
# one before each batch, up to YIELD_SECONDS, so a burst of writes is not slowed by embedding
# beside it: the worker is niced, but its database session, writing vectors into the HNSW
# indexes, is not: held off, single records went nearly twice as fast (bench/experiences.py,
# bench/RESULTS.md). The cap keeps a sustained burst
# from starving embedding: a batch every YIELD_SECONDS at the least.
RECORDING = "mirix:experiences-recording"
RECORDING_MILLISECONDS = 1000
YIELD_SECONDS = 10.0
_YIELD_POLL_SECONDS = 0.1


def embedding_fault_passing(error: BaseException) -> bool:
    """Whether an embedding job that raised this is worth retrying as it is: the provider's
    overload or the database out of reach, not a bug or bad data."""
    return isinstance(error, EmbeddingTransientError) or database_unreachable(error)


def _start(client: redis.Redis, slot: int) -> None:
    """Publish a drain for ``slot``, whose flag the caller has just set."""
    try:
        task_publish(DRAIN_TASK, slot)
    except OperationalError:
        client.delete(DRAINING.format(slot=slot))  # the next push tries again
        raise


def experiences_embed_soon(experience_ids: Sequence[int]) -> None:
    """Queue these committed experiences for embedding, starting a drain if none runs."""
    if not experience_ids:
        return
    client = redis_client()
    try:
        pipeline = client.pipeline(transaction=False)
        pipeline.rpush(QUEUE, *experience_ids)
        pipeline.set(DRAINING.format(slot=0), 1, nx=True, ex=DRAINING_SECONDS)
        pipeline.set(RECORDING, 1, px=RECORDING_MILLISECONDS)
        _, started, _ = pipeline.execute()
        if started:
            _start(client, 0)
    except (redis.RedisError, OperationalError) as error:
        logger.warning(
            "%s experiences not queued for embedding (%s): the sweep embeds them",
            len(experience_ids),
            error,
        )


def _helpers_start(client: redis.Redis, slot: int) -> None:
    """More than a batch waits: start a drain in each free slot but this one."""
    for other in range(settings.EXPERIENCE_EMBED_DRAINS):
        if other != slot and client.set(
            DRAINING.format(slot=other), 1, nx=True, ex=DRAINING_SECONDS
        ):
            _start(client, other)


def _writes_yielded_to(client: redis.Redis, flag: str) -> None:
    """Wait while records are arriving, ``YIELD_SECONDS`` at most, holding the drain's slot."""
    deadline = time.monotonic() + YIELD_SECONDS
    while client.exists(RECORDING) and time.monotonic() < deadline:
        client.expire(flag, DRAINING_SECONDS)
        time.sleep(_YIELD_POLL_SECONDS)


def experiences_embed_drain(
    *, embedders: Sequence[EmbeddingProvider], slot: int = 0
) -> tuple[int, bool]:
    """Embed queued experiences, ``BATCH`` at a time, until the queue is empty or
    ``BATCHES_PER_TASK`` ran, as the drain holding ``slot``, each batch after records stop
    arriving (or ``YIELD_SECONDS``). Returns how many were embedded
    and whether more wait (the caller publishes the next drain of the slot; its flag stays
    set for it). A batch whose embedding fails for a passing reason (a provider's overload, a
    database restart) goes back to the head of the queue before the error propagates; any other
    failure is logged and the batch left to the beat sweep, so it cannot hold up the rest."""
    client = redis_client()
    flag = DRAINING.format(slot=slot)
    embedded = 0
    for _ in range(BATCHES_PER_TASK):
        _writes_yielded_to(client, flag)
        client.expire(flag, DRAINING_SECONDS)
        popped = client.lpop(QUEUE, BATCH)
        if not popped:
            client.delete(flag)
            # A push between the empty pop and the delete found the flag set and published
            # nothing: this drain takes its ids, unless a later push started another.
            if client.llen(QUEUE) and client.set(flag, 1, nx=True, ex=DRAINING_SECONDS):
                continue
            return embedded, False
        if len(popped) == BATCH and client.llen(QUEUE):
            _helpers_start(client, slot)
        ids = sorted({int(value) for value in popped})
        try:
            embedded += experiences_embed(experience_ids=ids, embedders=embedders)
        except Exception as error:
            if embedding_fault_passing(error):
                client.lpush(QUEUE, *ids)  # the task's retry takes them first
                raise
            # Not a passing fault: not put back, as the batch would fail every later drain too.
            logger.exception(
                "embedding %s queued experiences failed; the sweep tries them again", len(ids)
            )
    return embedded, True


def experiences_embed(
    *, experience_ids: Sequence[int], embedders: Sequence[EmbeddingProvider]
) -> int:
    """Embed these experiences with each model that lacks them, and group their actions'
    phrasings (with the first model, the one searches read). Missing rows are skipped; a row
    embedded already is not embedded again. Returns how many were embedded."""
    rows = list(Experience.objects.filter(pk__in=experience_ids).order_by("pk"))
    embedded = 0
    for embedder in embedders:
        have = set(
            EXPERIENCE_KIND.embedding_model.objects.filter(
                experience_id__in=[row.pk for row in rows], model=embedder.model_name
            ).values_list("experience_id", flat=True)
        )
        missing = [row for row in rows if row.pk not in have]
        if missing:
            written = embeddings_write_committed(
                documents=[(EXPERIENCE_KIND, row) for row in missing], embedders=[embedder]
            )
            gone = {row.pk for row in missing} - {row.pk for _kind, row in written}
            rows = [row for row in rows if row.pk not in gone]
            embedded = max(embedded, len(written))
    if embedders and rows:
        action_phrases_assign(experiences=rows, embedder=embedders[0])
    return embedded


def experiences_unembedded(*, model: str, limit: int, older_than: timedelta) -> list[int]:
    """Experiences recorded more than ``older_than`` ago with no embedding by ``model`` yet
    (the beat's sweep for embedding jobs a broker outage lost), oldest first. Younger ones
    are still in the queue: taking them too embedded a backlog twice."""
    return list(
        Experience.objects.exclude(embeddings__model=model)
        .filter(created_at__lt=timezone.now() - older_than)
        .order_by("pk")
        .values_list("pk", flat=True)[:limit]
    )
