"""Celery tasks of the skills app: thin wrappers that take ids and call one service."""

from __future__ import annotations

import contextlib
import logging
import random
import time
from datetime import timedelta

from celery import shared_task
from django.conf import settings

from mirix_site.search.spaces import write_embedders
from skills.embedding_queue import (
    DRAIN_TASK,
    embedding_fault_passing,
    experiences_embed,
    experiences_embed_drain,
    experiences_unembedded,
)
from skills.services.learning import LEARNING_RUN_TASK, learning_run_publish
from skills.services.skills import SKILLS_EMBED_TASK, skills_embed

logger = logging.getLogger(__name__)

MAX_RETRIES = 5
# Experiences a sweep embeds at most; the next sweep takes the rest.
SWEEP_BATCH = 2000


@shared_task(name=DRAIN_TASK, bind=True, max_retries=MAX_RETRIES, acks_late=True)
def experiences_embed_drain_task(self, slot: int = 0) -> int:  # noqa: ANN001
    """Embed the experiences queued for it (skills/embedding_queue.py) and group their actions'
    phrasings, publishing itself again while more wait. Idempotent: a redelivery embeds only
    what still lacks an embedding. A provider's overload or a database restart is retried with
    backoff; after the last retry the beat sweep takes the rows."""
    try:
        embedded, more = experiences_embed_drain(embedders=write_embedders(), slot=slot)
    except Exception as error:
        if not embedding_fault_passing(error):
            raise
        countdown = random.uniform(0.5, 1.0) * min(900.0, 2.0 * 2**self.request.retries)  # noqa: S311
        raise self.retry(countdown=countdown, exc=error) from error
    if more:
        experiences_embed_drain_task.delay(slot)
    return embedded


@shared_task
def embed_pending_experiences() -> int:
    """The safety net of experience embedding: rows whose job the broker lost."""
    embedders = write_embedders()
    pending = experiences_unembedded(
        model=embedders[0].model_name,
        limit=SWEEP_BATCH,
        older_than=timedelta(seconds=settings.EXTRACTION_REQUEUE_AFTER),
    )
    if pending:
        logger.info("embedding %s experiences the queue missed", len(pending))
        return experiences_embed(experience_ids=pending, embedders=embedders)
    return 0


@shared_task(name=SKILLS_EMBED_TASK, bind=True, max_retries=MAX_RETRIES, acks_late=True)
def skills_embed_task(
    self,  # noqa: ANN001
    skill_ids: list[int],
    *,
    org: str | None = None,
    user: str | None = None,
) -> int:
    """Embed skills an API request changed (a learning run embeds its own as it writes them).
    ``org`` and ``user`` only label it for Flower (mirix_site.common.publish.task_labels)."""
    try:
        return skills_embed(skill_ids=skill_ids, embedders=write_embedders())
    except Exception as error:
        if not embedding_fault_passing(error):
            raise
        countdown = random.uniform(0.5, 1.0) * min(900.0, 2.0 * 2**self.request.retries)  # noqa: S311
        raise self.retry(countdown=countdown, exc=error) from error


@shared_task(name=LEARNING_RUN_TASK, bind=True, max_retries=MAX_RETRIES, acks_late=True)
def learning_run_task(
    self,  # noqa: ANN001
    run_id: int,
    *,
    org: str | None = None,
    user: str | None = None,
) -> str | None:
    """Claim the learning run and run it, a slice of ``LEARNING_RUN_SLICE_SECONDS`` at a time
    (a long run gives its claim back and publishes itself again, so no task outlives Celery's
    time limit). A run held by another worker, or finished, is left alone: a holder that died
    leaves a stale heartbeat, and the beat (``recover_learning_runs``) publishes the run again.
    A provider's overload or a database restart puts the run back in the queue and retries
    with backoff. ``org`` and ``user`` only label it for Flower (they name the run's owner;
    mirix_site.common.publish.task_labels); a message sent without them runs the same."""
    from skills.learning.execute import learning_fault_passing, learning_run_work
    from skills.learning.runs import (
        RunLostError,
        SliceDoneError,
        learning_run_claim,
        learning_run_release,
    )

    claim = learning_run_claim(run_id=run_id)
    if claim is None:  # finished, held by a live worker, or another run of the user runs
        return None
    try:
        run = learning_run_work(
            claim=claim, deadline=time.monotonic() + settings.LEARNING_RUN_SLICE_SECONDS
        )
    except RunLostError:
        logger.warning("learning run %s was claimed by another worker; stopping", run_id)
        return None
    except SliceDoneError:
        if learning_run_release(claim):
            learning_run_publish(claim.run)
        else:  # a newer run of the user is queued: this one is claimed again once stale
            learning_run_publish(claim.run, countdown=settings.LEARNING_RUN_STALE_AFTER + 1)
        return "continued"
    except Exception as error:
        if not learning_fault_passing(error):
            logger.exception("learning run %s failed", run_id)
            _run_failed(claim, error)
            return "failed"
        learning_run_release(claim)
        countdown = random.uniform(0.5, 1.0) * min(900.0, 5.0 * 2**self.request.retries)  # noqa: S311
        raise self.retry(countdown=countdown, exc=error) from error
    return run.state


def _run_failed(claim: object, error: Exception) -> None:
    from skills.learning.runs import RunLostError, learning_run_fail

    with contextlib.suppress(RunLostError):  # the new holder finishes it
        learning_run_fail(claim, f"{type(error).__name__}: {error}")  # type: ignore[arg-type]


@shared_task
def recover_learning_runs() -> int:
    """The learning-run queue's driver (beat, every minute): queued runs whose message the
    broker may have lost, and running runs whose worker stopped beating, are published again
    (the claim decides who runs them)."""
    from skills.learning.runs import learning_runs_due

    due = learning_runs_due(queued_older_than=timedelta(seconds=60))
    for run in due:
        learning_run_publish(run)
    if due:
        logger.info("published %s learning runs again", len(due))
    return len(due)
