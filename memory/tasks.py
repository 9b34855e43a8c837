"""Celery tasks of the memory app: thin wrappers that take ids and call one service."""

from __future__ import annotations

import logging
import random

from celery import shared_task
from celery.exceptions import MaxRetriesExceededError

from memory.models import ExtractionJob
from memory.services import (
    extraction_job_requeue,
    extraction_job_run,
    extraction_jobs_recover,
)
from memory.services.dreams import (
    DREAM_RUN_TASK,
    dream_run_claim_and_perform,
    dreams_due_queue,
)
from memory.services.extraction import EXTRACT_TASK
from mirix_site.common.database import database_unreachable
from mirix_site.common.history import EXTRACTION, history_context
from mirix_site.providers.embeddings import EmbeddingTransientError
from mirix_site.providers.llm import LLMTransientError

logger = logging.getLogger(__name__)

MAX_RETRIES = 5
# A provider's overload lasts minutes: 30 s, 60 s, 120 s ... A database restart takes seconds:
# 2 s, 4 s, 8 s ... (about a minute over all the retries; the recovery beat job after that).
PROVIDER_RETRY_BASE = 30.0
DATABASE_RETRY_BASE = 2.0


def _backoff(
    retries: int, hint: float | None = None, *, base: float = PROVIDER_RETRY_BASE
) -> float:
    """Exponential backoff with jitter (half to all of ``base`` x 2^retries, capped at 15 min),
    or the provider's own Retry-After when it gave one."""
    if hint:
        return min(hint, 900.0)
    return random.uniform(0.5, 1.0) * min(900.0, base * 2**retries)  # noqa: S311


def _served(jobs: list[ExtractionJob]) -> list[dict[str, object]]:
    """What a run did, as its result: Flower shows it beside the labels the task was queued
    with, which may name someone else (the run took the fairest jobs)."""
    return [
        {
            "job": job.pk,
            "org": job.organization_id,
            "user": job.end_user.user_id,
            "messages": job.message_count,
            "status": job.status,
        }
        for job in jobs
    ]


@shared_task(name=EXTRACT_TASK, bind=True, max_retries=MAX_RETRIES, acks_late=True)
def extract_memories(
    self,  # noqa: ANN001
    organization_id: str,
    job_id: int,
    *,
    queued_for_org: str | None = None,
    queued_for_user: str | None = None,
) -> list[dict[str, object]] | None:
    """A token that says extraction work is queued: it runs the fairest queued jobs, not
    necessarily the one it names (see extraction_job_run). When the job it names failed, its
    retry is the only task that takes that job, after the backoff. ``queued_for_*`` only
    label it for Flower (mirix_site.common.publish.task_labels); a message sent without them
    (queued by an older release) runs the same. Returns whom the run served: each job run,
    its organization, user, messages and status (empty: nothing was left to claim)."""
    # Celery delivers a task again when its worker is lost (acks_late, reject_on_worker_lost).
    redelivered = bool((self.request.delivery_info or {}).get("redelivered"))
    try:
        with history_context(EXTRACTION, job_id=job_id):
            ran = extraction_job_run(
                organization_id=organization_id,
                job_id=job_id,
                redelivered=redelivered,
                retried=self.request.retries > 0,
            )
    except (LLMTransientError, EmbeddingTransientError) as error:
        final = self.request.retries >= MAX_RETRIES
        extraction_job_requeue(
            organization_id=organization_id, job_id=job_id, error=str(error), final=final
        )
        if final:
            logger.error(
                "extraction job %s failed after %s retries: %s", job_id, MAX_RETRIES, error
            )
            return None
        try:
            raise self.retry(
                countdown=_backoff(self.request.retries, getattr(error, "retry_after", None)),
                exc=error,
            )
        except MaxRetriesExceededError:
            return None
    except Exception as error:
        if not database_unreachable(error):
            try:
                extraction_job_requeue(
                    organization_id=organization_id, job_id=job_id, error=repr(error), final=True
                )
            except Exception as requeue_error:
                # The outage began after the run's own error: the job cannot be failed now.
                if not database_unreachable(requeue_error):
                    raise
                error = requeue_error
            else:
                raise
        # Nothing can be written now: the job keeps its row (queued, or running with its run
        # lock gone with the session) for the retry to take again; after the last retry this
        # raises, and the recovery beat job takes it.
        raise self.retry(
            countdown=_backoff(self.request.retries, base=DATABASE_RETRY_BASE), exc=error
        ) from error
    return _served(ran)


@shared_task
def recover_extraction_jobs() -> int:
    return extraction_jobs_recover()


@shared_task(name=DREAM_RUN_TASK, acks_late=True)
def dream_run_task(
    organization_id: str, run_id: int, *, org: str | None = None, user: str | None = None
) -> str | None:
    """A queued dream run (``memory.services.dreams``); ``org`` and ``user`` only label it for
    Flower. A run already taken, or one whose user has a dream running, is left to the beat."""
    run = dream_run_claim_and_perform(organization_id=organization_id, run_id=run_id)
    return None if run is None else run.state


@shared_task
def queue_due_dreams() -> int:
    return dreams_due_queue()
