"""Running extraction jobs: claim, extract one batch, store, mark the messages processed.

A task claims the queued jobs fairest to take (across tenants, see _jobs_claim) with a
conditional update (``queued → running``); a delivery that finds none queued claims nothing.
The batch's messages are locked (``SKIP LOCKED``) for the whole run and marked processed in the
same transaction that stores their memories, so a crash half-way leaves them pending, and the
fingerprints make the re-run store nothing twice.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from memory.extractors import (
    ExtractionOutcome,
    extract_deterministic,
    extract_with_llm,
    proposal_redacted,
)
from memory.models import ExtractionJob, MetaAgent
from memory.models.agents import MEMORY_COMPONENTS
from memory.providers.llm import LLMProvider, llm_provider_from_settings
from memory.retrieval.spaces import write_embedders
from memory.services.records import Owner, StoreRequest, memories_store_many
from sessions.models import Message
from sessions.selectors import (
    PendingSize,
    messages_pending_lock,
    messages_pending_owners_list,
    messages_pending_sizes,
    messages_preceding_get,
)
from sessions.services import messages_mark_attempt_failed, messages_mark_processed

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


# One statement whichever way it goes: a user's queued job exists already (nothing to do:
# it takes every pending message when it runs) or is created now. The partial unique index
# "one queued job per (client, user)" is the arbiter, so concurrent adds cannot make two.
_JOB_ENSURE_SQL = """
INSERT INTO memory_extractionjob
       (organization_id, client_id, end_user_id, status, attempts, message_count, memory_counts,
        llm_calls, input_tokens, output_tokens, error, created_at)
VALUES (%(organization_id)s, %(client_id)s, %(end_user_id)s, 'queued', 0, 0, '{}', 0, 0, 0, '',
        %(now)s)
ON CONFLICT (client_id, end_user_id) WHERE status = 'queued' DO NOTHING
RETURNING id
"""


def extraction_job_ensure(*, organization_id: str, client_id: str, end_user_id: int) -> bool:
    """Make sure a queued job will pick up the user's pending messages; publish it after the
    commit if it is new (then True). Call inside the transaction that stored the messages."""
    with connection.cursor() as cursor:
        cursor.execute(
            _JOB_ENSURE_SQL,
            {
                "organization_id": organization_id,
                "client_id": client_id,
                "end_user_id": end_user_id,
                "now": timezone.now(),
            },
        )
        created = cursor.fetchone()
    if created is None:
        return False
    transaction.on_commit(lambda: extraction_job_publish(created[0], organization_id))
    return True


def _enabled_types(client_id: str) -> set[str]:
    components = (
        MetaAgent.objects.filter(client_id=client_id)
        .values_list("memory_components", flat=True)
        .first()
    )
    return set(components if components is not None else MEMORY_COMPONENTS)


# The queued jobs a task may claim, at most ``per_organization`` of each organization (its
# oldest, numbered), beside when that organization was last served (its latest claim; the
# index extraction_job_served answers it per organization). ``tried``: rows this claim has
# already locked or found locked. A job that failed waits out its backoff for its own task's
# retry (``job_id``), and then runs alone: the fair order would otherwise hand it to the next
# task at once, spending its attempts in seconds, and whatever failed it could fail others.
# Nothing is locked here: the claim locks only the rows it takes (_CLAIM_LOCK_SQL), so a
# concurrent claim still finds the rest.
_CANDIDATES_SQL = """
WITH retry AS (
    SELECT id FROM memory_extractionjob
     WHERE id = %(job_id)s AND status = 'queued' AND attempts > 0
), queued AS (
    SELECT id, organization_id, client_id, end_user_id,
           row_number() OVER (PARTITION BY organization_id ORDER BY id) AS turn
      FROM memory_extractionjob
     WHERE status = 'queued' AND id <> ALL(%(tried)s::bigint[])
       AND CASE WHEN EXISTS (SELECT FROM retry) THEN id = %(job_id)s ELSE attempts = 0 END
), served AS (
    SELECT waiting.organization_id,
           (SELECT max(job.started_at) FROM memory_extractionjob AS job
             WHERE job.organization_id = waiting.organization_id) AS served_at
      FROM (SELECT DISTINCT organization_id FROM queued) AS waiting
)
SELECT queued.id, queued.client_id, queued.end_user_id
  FROM queued JOIN served USING (organization_id)
 WHERE queued.turn <= %(per_organization)s
 ORDER BY queued.turn, served.served_at NULLS FIRST, queued.id
"""

# Rows another claim holds are skipped, not waited for; one it has taken meanwhile is no
# longer queued (PostgreSQL re-checks the condition on the row's latest version).
_CLAIM_LOCK_SQL = """
SELECT id FROM memory_extractionjob
 WHERE id = ANY(%(ids)s::bigint[]) AND status = 'queued'
   FOR UPDATE SKIP LOCKED
"""


def _jobs_pick(
    candidates: list[tuple[int, str, int]],
    sizes: dict[int, PendingSize],
    *,
    room: PendingSize,
    slots: int,
) -> list[int]:
    """In the candidates' order, at most ``slots`` jobs whose batches fit in ``room``; one too
    large is passed over for smaller ones after it. (In an empty run any job fits: a batch
    is at most one run's worth.)"""
    picked: list[int] = []
    messages, chars = room
    for job_id, _client_id, _end_user_id in candidates:
        if len(picked) == slots:
            break
        size = sizes[job_id]
        if size.messages <= messages and size.chars <= chars:
            picked.append(job_id)
            messages, chars = messages - size.messages, chars - size.chars
    return picked


@transaction.atomic
def _jobs_claim(*, job_id: int, limit: int) -> list[int]:
    """Claim up to ``limit`` queued jobs in the fair order, of any organization, whichever job
    the task named. The broker delivers tasks first published first, so a task taking its
    own job would leave a light tenant's job behind every task of a heavy tenant's import: a
    task is a token that says there is work. The job it named stays queued for a later token;
    tokens left when nothing is queued claim nothing.

    The fair order is round-robin over the organizations with queued jobs, the least recently
    served first: each one's oldest job, then each one's second, and so on. So while others
    wait, no organization has a second job in a run before each of them has its first;
    alone, it may fill the run. Within an organization the oldest job goes first, and a user
    whose batch filled queues a new job behind the others, so users take turns.

    Jobs join the run while their batches fit in one batch's worth (``EXTRACTION_BATCH_MESSAGES``
    turns, ``EXTRACTION_BATCH_CHARS`` of text): small jobs share a run (and an embedding call),
    a large one runs alone."""
    batch = PendingSize(settings.EXTRACTION_BATCH_MESSAGES, settings.EXTRACTION_BATCH_CHARS)
    chosen: list[int] = []
    tried: set[int] = set()
    room = batch
    while len(chosen) < limit:
        with connection.cursor() as cursor:
            cursor.execute(
                _CANDIDATES_SQL,
                {"job_id": job_id, "per_organization": limit, "tried": sorted(tried)},
            )
            candidates = cursor.fetchall()
        if not candidates:
            break
        pending = messages_pending_sizes(
            owners=[(client_id, end_user_id) for _id, client_id, end_user_id in candidates],
            limit=batch.messages,
        )
        sizes: dict[int, PendingSize] = {}
        for candidate_id, client_id, end_user_id in candidates:
            messages, chars = pending.get((client_id, end_user_id), (0, 0))
            # A batch is cut at the text budget (see _job_batch).
            sizes[candidate_id] = PendingSize(messages, min(chars, batch.chars))
        picked = _jobs_pick(candidates, sizes, room=room, slots=limit - len(chosen))
        if not picked:
            break
        with connection.cursor() as cursor:
            cursor.execute(_CLAIM_LOCK_SQL, {"ids": picked})
            locked = [row[0] for row in cursor.fetchall()]
        chosen.extend(locked)
        room = PendingSize(
            room.messages - sum(sizes[candidate_id].messages for candidate_id in locked),
            room.chars - sum(sizes[candidate_id].chars for candidate_id in locked),
        )
        if len(locked) == len(picked):
            break  # no other claim was in the way: what fits is taken
        # Another claim holds some of them: look again, past every job tried.
        tried.update(picked)
    ExtractionJob.objects.filter(pk__in=chosen).update(
        status=ExtractionJob.Status.RUNNING, started_at=timezone.now(), attempts=F("attempts") + 1
    )
    return sorted(chosen)


def _starts_exchange(message: Message, previous: Message) -> bool:
    """Whether ``message`` opens a new exchange after ``previous`` (as the deterministic
    extractor reads them: a user turn after a reply, or another session)."""
    return message.session_id != previous.session_id or (
        message.role == Message.Role.USER and previous.role != Message.Role.USER
    )


def _job_batch(job: ExtractionJob) -> list[Message]:
    """The user's pending turns, oldest first, locked for this transaction: at most
    ``EXTRACTION_BATCH_MESSAGES`` of them and ``EXTRACTION_BATCH_CHARS`` of text, cut before an
    exchange so that a reply stays with what it answers (an exchange longer than that is cut
    where the text runs out, at one turn at least). The turns left over stay pending."""
    locked = messages_pending_lock(
        client_id=job.client_id,
        end_user_id=job.end_user_id,
        limit=settings.EXTRACTION_BATCH_MESSAGES,
    )
    chars, fits, cut = 0, 0, 0
    for index, message in enumerate(locked):
        if index and _starts_exchange(message, locked[index - 1]):
            cut = index
        chars += len(message.text)
        if index and chars > settings.EXTRACTION_BATCH_CHARS:
            break
        fits = index + 1
    else:
        return locked
    return locked[: cut or fits]


def extraction_job_run(*, organization_id: str, job_id: int) -> list[ExtractionJob]:
    """Claim and run the fairest queued work (see _jobs_claim: not necessarily the job named),
    with the deterministic extractor up to ``EXTRACTION_JOBS_PER_RUN`` jobs together (one
    embedding call for all: the model's fixed cost per call dominates small batches). With an
    LLM, one job: its call dominates anyway. Returns the jobs run; empty when there was nothing
    to claim. On an error every claimed job but ``job_id`` goes back to the queue at no cost
    of an attempt, for the recovery job to publish again (a token of its own, after a pause),
    and the error propagates, for the task to retry or fail ``job_id`` (see
    extraction_job_requeue)."""
    provider = llm_provider_from_settings()
    limit = 1 if provider is not None else settings.EXTRACTION_JOBS_PER_RUN
    claimed = _jobs_claim(job_id=job_id, limit=limit)
    if not claimed:
        logger.info("extraction job %s (%s): nothing to claim", job_id, organization_id)
        return []
    jobs = list(ExtractionJob.objects.filter(pk__in=claimed).order_by("id"))
    try:
        _jobs_execute(jobs, provider)
    except Exception as error:
        for job in jobs:
            if job.pk != job_id:
                # The error may be another job's, of another tenant even: it costs this one
                # no attempt. Its next run is alone (see _CANDIDATES_SQL).
                extraction_job_requeue(
                    organization_id=job.organization_id,
                    job_id=job.pk,
                    error=repr(error),
                    final=False,
                    count_attempt=False,
                )
        raise
    return jobs


@transaction.atomic
def _jobs_execute(jobs: list[ExtractionJob], provider: LLMProvider | None) -> None:
    batches = [_job_batch(job) for job in jobs]
    outcomes = [
        (
            extract_with_llm(batch, provider)
            if provider
            # A batch's first exchange in a session may reply to a turn of an earlier batch.
            else extract_deterministic(batch, messages_preceding_get(messages=batch))
        )
        if batch
        else ExtractionOutcome(proposals=[])
        for batch in batches
    ]
    counts = memories_store_many(
        requests=[
            StoreRequest(
                owner=Owner(job.organization_id, job.client_id, job.end_user_id),
                # Whichever extractor wrote them: no sensitive value outside the vault.
                proposals=[proposal_redacted(proposal) for proposal in outcome.proposals],
                enabled_types=_enabled_types(job.client_id),
            )
            for job, outcome in zip(jobs, outcomes, strict=True)
        ],
        embedders=write_embedders(),
    )
    now = timezone.now()
    messages_mark_processed(
        message_ids=[message.pk for batch in batches for message in batch], extracted_at=now
    )
    # A long backlog, cut into batches, or turns that arrived during the run.
    waiting = messages_pending_sizes(
        owners=[(job.client_id, job.end_user_id) for job in jobs], limit=1
    )
    for job, batch, outcome, job_counts in zip(jobs, batches, outcomes, counts, strict=True):
        job.status = ExtractionJob.Status.SUCCEEDED
        job.finished_at = now
        job.message_count = len(batch)
        job.memory_counts = job_counts
        job.error = ""
        job.llm_calls += outcome.llm_calls
        job.input_tokens += outcome.input_tokens
        job.output_tokens += outcome.output_tokens
        job.save()
        if (job.client_id, job.end_user_id) in waiting:
            extraction_job_ensure(
                organization_id=job.organization_id,
                client_id=job.client_id,
                end_user_id=job.end_user_id,
            )


@transaction.atomic
def extraction_job_requeue(
    *, organization_id: str, job_id: int, error: str, final: bool, count_attempt: bool = True
) -> None:
    """After a failed run: back to ``queued`` for the task's retry, or (``final``) ``failed``,
    counting the attempt against the user's pending messages (unless ``count_attempt`` is
    false: the job only shared the failed run); a message that has failed
    ``EXTRACTION_MAX_ATTEMPTS`` times is marked failed and left alone."""
    job = (
        ExtractionJob.objects.select_for_update()
        .filter(pk=job_id, organization_id=organization_id, status=ExtractionJob.Status.RUNNING)
        .first()
    )
    if job is None:
        return
    job.error = error[:2000]
    if count_attempt:
        messages_mark_attempt_failed(
            client_id=job.client_id,
            end_user_id=job.end_user_id,
            give_up_after=settings.EXTRACTION_MAX_ATTEMPTS,
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
    """The beat job's safety net; returns how many jobs it queued or published again.
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
    created = 0
    with transaction.atomic():
        owners = messages_pending_owners_list(created_before=now - older_than)
        for organization_id, client_id, end_user_id in owners:
            created += extraction_job_ensure(
                organization_id=organization_id, client_id=client_id, end_user_id=end_user_id
            )
    published = 0
    for job in ExtractionJob.objects.filter(
        status=ExtractionJob.Status.QUEUED, created_at__lt=now - older_than
    ):
        published += extraction_job_publish(job.pk, job.organization_id)
    return created + published
