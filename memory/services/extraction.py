"""Running extraction jobs: claim, extract one batch, store, mark the messages processed.

A job is claimed with a conditional update (``queued → running``); a second delivery of the same
job finds nothing to claim. The batch's messages are locked (``SKIP LOCKED``) for the whole
run and marked processed in the same transaction that stores their memories, so a crash
half-way leaves them pending, and the fingerprints make the re-run store nothing twice.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from memory.extractors import extract_deterministic, extract_with_llm
from memory.models import ExtractionJob, MetaAgent
from memory.models.agents import MEMORY_COMPONENTS
from memory.providers.embeddings import embedding_provider_from_settings
from memory.providers.llm import llm_provider_from_settings
from memory.services.records import Owner, memories_store
from sessions.models import Message

logger = logging.getLogger(__name__)


def extraction_job_publish(job_id: int, organization_id: str) -> bool:
    """Hand the job to the broker. With the broker down the job stays queued in the database
    and the recovery beat job publishes it again: nothing is lost, so this never raises."""
    from memory.tasks import extract_memories

    try:
        # One quick retry: enough to replace a pooled connection that died with a Redis
        # restart, short enough not to hold a web request when Redis is down.
        extract_memories.apply_async(
            args=[organization_id, job_id],
            retry=True,
            retry_policy={"max_retries": 1, "interval_start": 0, "interval_step": 0.1},
        )
    except Exception:  # kombu/redis raise many types for "broker unreachable"
        logger.warning(
            "broker unreachable: extraction job %s stays queued for the recovery job", job_id
        )
        return False
    return True


def extraction_job_ensure(*, organization_id: str, client_id: str, end_user_id: int) -> None:
    """Make sure a queued job will pick up the user's pending messages; publish it after the
    commit if it is new. Call inside the transaction that stored the messages."""
    job = (
        ExtractionJob.objects.select_for_update()
        .filter(client_id=client_id, end_user_id=end_user_id, status=ExtractionJob.Status.QUEUED)
        .first()
    )
    if job is not None:
        return  # already published; it takes every pending message when it runs
    try:
        with transaction.atomic():
            job = ExtractionJob.objects.create(
                organization_id=organization_id, client_id=client_id, end_user_id=end_user_id
            )
    except IntegrityError:
        return  # a concurrent add created the queued job
    transaction.on_commit(lambda: extraction_job_publish(job.pk, organization_id))


def _enabled_types(client_id: str) -> set[str]:
    components = (
        MetaAgent.objects.filter(client_id=client_id)
        .values_list("memory_components", flat=True)
        .first()
    )
    return set(components if components is not None else MEMORY_COMPONENTS)


def extraction_job_run(*, organization_id: str, job_id: int) -> ExtractionJob | None:
    """Run one queued job; None when there was nothing to claim (already run, or taken).
    Transient provider errors propagate for the task to retry (see extraction_job_requeue)."""
    claimed = ExtractionJob.objects.filter(
        pk=job_id, organization_id=organization_id, status=ExtractionJob.Status.QUEUED
    ).update(
        status=ExtractionJob.Status.RUNNING, started_at=timezone.now(), attempts=F("attempts") + 1
    )
    if not claimed:
        logger.info("extraction job %s: nothing to claim", job_id)
        return None
    job = ExtractionJob.objects.get(pk=job_id)
    owner = Owner(job.organization_id, job.client_id, job.end_user_id)
    with transaction.atomic():
        batch = list(
            Message.objects.select_for_update(skip_locked=True)
            .filter(
                client_id=job.client_id,
                end_user_id=job.end_user_id,
                extraction=Message.Extraction.PENDING,
            )
            .order_by("id")[: settings.EXTRACTION_BATCH_MESSAGES]
        )
        provider = llm_provider_from_settings() if batch else None
        if not batch:
            outcome = None
        elif provider is not None:
            outcome = extract_with_llm(batch, provider)
        else:
            outcome = extract_deterministic(batch)
        counts = (
            memories_store(
                owner=owner,
                proposals=outcome.proposals,
                embedder=embedding_provider_from_settings(),
                enabled_types=_enabled_types(job.client_id),
            )
            if outcome
            else {}
        )
        now = timezone.now()
        Message.objects.filter(pk__in=[message.pk for message in batch]).update(
            extraction=Message.Extraction.PROCESSED, extracted_at=now
        )
        job.status = ExtractionJob.Status.SUCCEEDED
        job.finished_at = now
        job.message_count = len(batch)
        job.memory_counts = counts
        job.error = ""
        if outcome is not None:
            job.llm_calls += outcome.llm_calls
            job.input_tokens += outcome.input_tokens
            job.output_tokens += outcome.output_tokens
        job.save()
        if len(batch) == settings.EXTRACTION_BATCH_MESSAGES:
            # More may be waiting (a long backlog, or turns that arrived during the run).
            extraction_job_ensure(
                organization_id=job.organization_id,
                client_id=job.client_id,
                end_user_id=job.end_user_id,
            )
    return job


@transaction.atomic
def extraction_job_requeue(*, organization_id: str, job_id: int, error: str, final: bool) -> None:
    """After a failed run: back to ``queued`` for the task's retry, or (``final``) ``failed``,
    counting the attempt against the user's pending messages; a message that has failed
    ``EXTRACTION_MAX_ATTEMPTS`` times is marked failed and left alone."""
    job = (
        ExtractionJob.objects.select_for_update()
        .filter(pk=job_id, organization_id=organization_id, status=ExtractionJob.Status.RUNNING)
        .first()
    )
    if job is None:
        return
    job.error = error[:2000]
    pending = Message.objects.filter(
        client_id=job.client_id, end_user_id=job.end_user_id, extraction=Message.Extraction.PENDING
    )
    pending.update(extraction_attempts=F("extraction_attempts") + 1)
    pending.filter(extraction_attempts__gte=settings.EXTRACTION_MAX_ATTEMPTS).update(
        extraction=Message.Extraction.FAILED
    )
    if final:
        job.status = ExtractionJob.Status.FAILED
        job.finished_at = timezone.now()
        job.save(update_fields=["status", "error", "finished_at"])
        return
    other_queued = ExtractionJob.objects.filter(
        client_id=job.client_id, end_user_id=job.end_user_id, status=ExtractionJob.Status.QUEUED
    ).exists()
    if other_queued:
        # New turns queued another job meanwhile; it takes these messages too.
        job.status = ExtractionJob.Status.FAILED
        job.error = f"{job.error}\n(retried by the user's next queued job)"
        job.finished_at = timezone.now()
        job.save(update_fields=["status", "error", "finished_at"])
        return
    job.status = ExtractionJob.Status.QUEUED
    job.save(update_fields=["status", "error"])


def extraction_jobs_recover(*, older_than: timedelta | None = None) -> int:
    """The beat job's safety net; returns how many jobs it (re)published.
    - running jobs older than the task time limit: their worker died; queue them again;
    - queued jobs older than ``older_than``: the broker may have lost them; publish again;
    - pending messages older than ``older_than`` with no job: queue one for their user.
    Publishing a job twice is harmless: only one delivery can claim it."""
    if older_than is None:
        older_than = timedelta(seconds=settings.EXTRACTION_REQUEUE_AFTER)
    now = timezone.now()
    stale_running = now - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT + 60)
    for job in ExtractionJob.objects.filter(
        status=ExtractionJob.Status.RUNNING, started_at__lt=stale_running
    ):
        extraction_job_requeue(
            organization_id=job.organization_id, job_id=job.pk, error="worker lost", final=False
        )
    with transaction.atomic():
        owners = (
            Message.objects.filter(
                extraction=Message.Extraction.PENDING, created_at__lt=now - older_than
            )
            .values_list("organization_id", "client_id", "end_user_id")
            .distinct()
        )
        for organization_id, client_id, end_user_id in owners:
            extraction_job_ensure(
                organization_id=organization_id, client_id=client_id, end_user_id=end_user_id
            )
    published = 0
    for job in ExtractionJob.objects.filter(
        status=ExtractionJob.Status.QUEUED, created_at__lt=now - older_than
    ):
        published += extraction_job_publish(job.pk, job.organization_id)
    return published
