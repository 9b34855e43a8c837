"""Running extraction jobs: claim, extract one batch, store, mark the messages processed.

A task claims the queued jobs fairest to take (across tenants, see _jobs_claim) with a
conditional update (``queued → running``); a delivery that finds none queued claims nothing.
The batch's messages are locked (``SKIP LOCKED``) for the whole run and marked processed in the
same transaction that stores their memories, so a crash half-way leaves them pending, and the
fingerprints make the re-run store nothing twice.

A running job belongs to the database session that claimed it: the claim takes an advisory
lock per job, in the claiming transaction, and the run lets it go when it ends. A worker that
dies (SIGKILL, out of memory, its host gone) or loses its connection loses the lock with its
session, so a running job whose lock is free has no runner and is queued again at once (by the
delivery Celery sends again when a worker is lost, or the recovery beat job), not only once it
is older than the hard time limit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from accounts.services import end_users_hold
from memory.extractors import (
    EpisodeBounds,
    ExtractionOutcome,
    Proposal,
    exchange_continues,
    extract_deterministic,
    extract_with_llm,
    proposal_redacted,
    proposals_known,
)
from memory.models import ExtractionJob, MetaAgent
from memory.models.agents import MEMORY_COMPONENTS
from memory.services.records import Owner, StoreRequest, memories_store_many
from memory.tags import same_scope
from mirix_site.common.database import database_unreachable, prepared_cursor
from mirix_site.common.publish import task_labels, task_publish
from mirix_site.providers.embeddings import embedding_provider_from_settings
from mirix_site.providers.llm import LLMProvider, llm_provider_from_settings
from mirix_site.search.spaces import write_embedders
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

# Run locks are session-level advisory locks on this base plus the job id: far above the small
# keys of the project's other advisory locks (vector_indexes.SYNC_LOCK), and job ids stay below
# 2**62.
RUN_LOCK_BASE = 1 << 62
# The extraction task (``memory.tasks``), queued by its name.
EXTRACT_TASK = "memory.tasks.extract_memories"


def extraction_job_publish(job_id: int, organization_id: str, user_id: str) -> bool:
    """Hand the job to the broker, labelled with whom it was queued for (``user_id``: the end
    user's own id; see task_labels). With the broker down the job stays queued in the database
    and the recovery beat job publishes it again: nothing is lost, so this never raises."""
    labels = task_labels(organization_id=organization_id, user_id=user_id, token=True)
    try:
        task_publish(EXTRACT_TASK, organization_id, job_id, labels=labels, quick=True)
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
RETURNING id, (SELECT user_id FROM accounts_enduser WHERE id = %(end_user_id)s)
"""


def extraction_job_ensure(*, organization_id: str, client_id: str, end_user_id: int) -> bool:
    """Make sure a queued job will pick up the user's pending messages; publish it after the
    commit if it is new (then True). Call inside the transaction that stored the messages."""
    with prepared_cursor() as cursor:
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
    job_id, user_id = created
    transaction.on_commit(lambda: extraction_job_publish(job_id, organization_id, user_id))
    return True


def _agent_prompts(client_id: str) -> dict[str, str]:
    """The system prompts the client gave its agents, by agent type, for the LLM extractor."""
    meta_agent = MetaAgent.objects.filter(client_id=client_id).first()
    if meta_agent is None:
        return {}
    return {**meta_agent.system_prompts, "meta_memory_agent": meta_agent.system}


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
    # Taken before the commit that makes the jobs "running": no one sees them running unowned.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_lock(key) FROM unnest(%s::bigint[]) AS key",
            [[RUN_LOCK_BASE + pk for pk in chosen]],
        )
    return sorted(chosen)


def _run_lock_try(job_id: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [RUN_LOCK_BASE + job_id])
        row = cursor.fetchone()
    return bool(row and row[0])


def _run_locks_release(job_ids: Sequence[int]) -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_unlock(key) FROM unnest(%s::bigint[]) AS key",
                [[RUN_LOCK_BASE + pk for pk in job_ids]],
            )
    except DatabaseError as error:
        if not database_unreachable(error):
            raise
        # The connection is gone, and the session's locks went with it.


def episode_bounds() -> EpisodeBounds:
    """The settings' bounds on an episode, in tokens of the model that embeds it (the
    configured one, never more than it reads whole)."""
    embedder = embedding_provider_from_settings()
    return EpisodeBounds(
        max_turns=settings.EPISODE_MAX_TURNS,
        max_tokens=min(settings.EPISODE_MAX_TOKENS, embedder.max_chunk_tokens),
        max_gap=timedelta(seconds=settings.EPISODE_MAX_GAP),
        count_tokens=embedder.count_tokens,
        reply_chars=settings.EPISODE_REPLY_CHARS,
    )


def _job_batch(job: ExtractionJob, *, max_gap: timedelta, one_scope: bool) -> list[Message]:
    """The user's pending turns, oldest first, locked for this transaction: at most
    ``EXTRACTION_BATCH_MESSAGES`` of them and ``EXTRACTION_BATCH_CHARS`` of text, cut before an
    exchange so that a reply stays with what it answers (an exchange longer than that is cut
    where the text runs out, at one turn at least), and with ``one_scope`` before the first
    turn whose scope tags differ from the first's (an LLM's memory may cite any turns it
    reads, and must not mix scopes; turns differing only in their own ids share a batch:
    ``memory.tags``). The turns left over stay pending."""
    locked = messages_pending_lock(
        client_id=job.client_id,
        end_user_id=job.end_user_id,
        limit=settings.EXTRACTION_BATCH_MESSAGES,
    )
    if one_scope and locked:
        other = next(
            (
                index
                for index, message in enumerate(locked)
                if not same_scope(message.filter_tags, locked[0].filter_tags)
            ),
            None,
        )
        locked = locked[:other]
    chars, fits, cut, opener = 0, 0, 0, locked[0] if locked else None
    for index, message in enumerate(locked):
        if index and not exchange_continues(opener, locked[index - 1], message, max_gap):
            cut, opener = index, message
        chars += len(message.text)
        if index and chars > settings.EXTRACTION_BATCH_CHARS:
            break
        fits = index + 1
    else:
        return locked
    return locked[: cut or fits]


# How long a delivery sent again after its worker was lost waits for the dead runner's session
# to end (PostgreSQL notices a killed client within milliseconds, unless the backend is busy
# with a statement); past it, the recovery beat job takes the job.
REDELIVERY_LOCK_WAIT = 5.0


def extraction_job_run(
    *, organization_id: str, job_id: int, redelivered: bool = False, retried: bool = False
) -> list[ExtractionJob]:
    """Claim and run the fairest queued work (see _jobs_claim: not necessarily the job named),
    with the deterministic extractor up to ``EXTRACTION_JOBS_PER_RUN`` jobs together (one
    embedding call for all: the model's fixed cost per call dominates small batches). With an
    LLM, one job: its call dominates anyway. A job left running by a runner that is gone is
    queued again first (``redelivered``: the broker sends it again because its worker was
    lost; wait for that worker's session to end, and queue the other jobs that worker held
    too, of any organization: a run takes the fairest jobs). Returns the jobs run; empty when
    there was nothing to claim. On an error every claimed job but ``job_id`` goes back to the
    queue at no cost of an attempt, for the recovery job to publish again (a token of its own,
    after a pause), and the error propagates, for the task to retry or fail ``job_id`` (see
    extraction_job_requeue)."""
    provider = llm_provider_from_settings()
    limit = 1 if provider is not None else settings.EXTRACTION_JOBS_PER_RUN
    # Before the claim: other deliveries may take the orphan's turns, never the orphan itself.
    extraction_jobs_orphaned_requeue(
        job_ids=[job_id], wait=REDELIVERY_LOCK_WAIT if redelivered else 0.0
    )
    # The lost run may have held other jobs beside this one; so may a run a database outage
    # cut off (``retried``): its error left the others it held running, their locks gone.
    orphans = extraction_jobs_orphaned_requeue() if redelivered or retried else []
    claimed = _jobs_claim(job_id=job_id, limit=limit)
    # Those this run has no room for go to other workers now, not to the beat job.
    _jobs_publish(ExtractionJob.objects.filter(pk__in=orphans, status=ExtractionJob.Status.QUEUED))
    if not claimed:
        logger.info("extraction job %s (%s): nothing to claim", job_id, organization_id)
        return []
    # With their users: the task's result names whom the run served.
    jobs = list(
        ExtractionJob.objects.filter(pk__in=claimed).select_related("end_user").order_by("id")
    )
    try:
        jobs = _jobs_execute(jobs, provider)
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
    finally:
        _run_locks_release(claimed)
    return jobs


def _redacted(batch: Sequence[Message], proposals: Sequence[Proposal]) -> list[Proposal]:
    known = proposals_known(batch, proposals)
    return [proposal_redacted(proposal, known=known) for proposal in proposals]


@transaction.atomic
def _jobs_execute(jobs: list[ExtractionJob], provider: LLMProvider | None) -> list[ExtractionJob]:
    """Extract and store the jobs' batches; returns the jobs run. A job whose user was
    deleted (its row went with them) stops here, and a deletion that comes during the run
    waits for it, then deletes what it stored: the deletion always wins."""
    end_users_hold(end_user_ids=[job.end_user_id for job in jobs])
    alive = set(
        ExtractionJob.objects.filter(pk__in=[job.pk for job in jobs]).values_list("pk", flat=True)
    )
    stopped = [job.pk for job in jobs if job.pk not in alive]
    if stopped:
        logger.info("extraction jobs %s: their user's rows were deleted; stopping", stopped)
        jobs = [job for job in jobs if job.pk in alive]
    bounds = episode_bounds()
    batches = [
        _job_batch(job, max_gap=bounds.max_gap, one_scope=provider is not None) for job in jobs
    ]
    outcomes = [
        (
            extract_with_llm(batch, provider, _agent_prompts(job.client_id))
            if provider
            # A batch's first exchange in a session may reply to a turn of an earlier batch.
            else extract_deterministic(batch, messages_preceding_get(messages=batch), bounds)
        )
        if batch
        else ExtractionOutcome(proposals=[])
        for job, batch in zip(jobs, batches, strict=True)
    ]
    counts = memories_store_many(
        requests=[
            StoreRequest(
                owner=Owner(job.organization_id, job.client_id, job.end_user_id),
                # Whichever extractor wrote them: no sensitive value outside the vault.
                proposals=_redacted(batch, outcome.proposals),
                enabled_types=_enabled_types(job.client_id),
            )
            for job, batch, outcome in zip(jobs, batches, outcomes, strict=True)
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
        job.save(
            update_fields=[
                "status",
                "finished_at",
                "message_count",
                "memory_counts",
                "error",
                "llm_calls",
                "input_tokens",
                "output_tokens",
            ]
        )
        if (job.client_id, job.end_user_id) in waiting:
            extraction_job_ensure(
                organization_id=job.organization_id,
                client_id=job.client_id,
                end_user_id=job.end_user_id,
            )
    return jobs


@transaction.atomic
def extraction_job_requeue(
    *, organization_id: str, job_id: int, error: str, final: bool, count_attempt: bool = True
) -> bool:
    """After a failed run: back to ``queued`` for the task's retry, or (``final``) ``failed``,
    counting the attempt against the user's pending messages (unless ``count_attempt`` is
    false: the job only shared the failed run); a message that has failed
    ``EXTRACTION_MAX_ATTEMPTS`` times is marked failed and left alone. False when the job
    was not running (any more)."""
    job = (
        ExtractionJob.objects.select_for_update()
        .filter(pk=job_id, organization_id=organization_id, status=ExtractionJob.Status.RUNNING)
        .first()
    )
    if job is None:
        return False
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
        return True
    other_queued = ExtractionJob.objects.filter(
        client_id=job.client_id, end_user_id=job.end_user_id, status=ExtractionJob.Status.QUEUED
    ).exists()
    if other_queued:
        # New turns queued another job meanwhile; it takes these messages too.
        job.status = ExtractionJob.Status.FAILED
        job.error = f"{job.error}\n(retried by the user's next queued job)"
        job.finished_at = timezone.now()
        job.save(update_fields=["status", "error", "finished_at"])
        return True
    job.status = ExtractionJob.Status.QUEUED
    job.save(update_fields=["status", "error"])
    return True


def extraction_jobs_orphaned_requeue(
    *, organization_id: str | None = None, job_ids: Sequence[int] | None = None, wait: float = 0.0
) -> list[int]:
    """Queue again the running jobs (of the organization, those of ``job_ids``, or all) that no
    one runs any more:
    their run lock is free, or they started longer ago than the hard time limit lets a run last
    (a lock a connection pooler kept). The lost run counts as a failed attempt of the user's
    pending messages, so turns that kill their worker every time are given up in the end.
    ``wait``: seconds to keep trying a lock still held. Returns the ids of those requeued."""
    running = ExtractionJob.objects.filter(status=ExtractionJob.Status.RUNNING)
    if organization_id is not None:
        running = running.filter(organization_id=organization_id)
    if job_ids is not None:
        running = running.filter(pk__in=job_ids)
    stale = timezone.now() - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT + 60)
    requeued = []
    for job in running.only("pk", "organization_id", "started_at").order_by("pk"):
        deadline = time.monotonic() + wait
        while not (locked := _run_lock_try(job.pk)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not locked and job.started_at is not None and job.started_at >= stale:
            continue  # its runner holds the lock: alive
        try:
            if extraction_job_requeue(
                organization_id=job.organization_id, job_id=job.pk, error="worker lost", final=False
            ):
                requeued.append(job.pk)
        finally:
            # After the requeue's commit: a claimer that takes the job meanwhile waits for it.
            if locked:
                _run_locks_release([job.pk])
    return requeued


def extraction_jobs_recover(*, older_than: timedelta | None = None) -> int:
    """The beat job's safety net; returns how many jobs it queued or published again.
    - running jobs whose runner is gone (extraction_jobs_orphaned_requeue): queue them again
      and publish them at once;
    - queued jobs older than ``older_than``: the broker may have lost them; publish again;
    - pending messages older than ``older_than`` with no job: queue one for their user.
    Publishing a job twice is harmless: only one delivery can claim it."""
    if older_than is None:
        older_than = timedelta(seconds=settings.EXTRACTION_REQUEUE_AFTER)
    now = timezone.now()
    orphaned = extraction_jobs_orphaned_requeue()
    created = 0
    with transaction.atomic():
        owners = messages_pending_owners_list(created_before=now - older_than)
        for organization_id, client_id, end_user_id in owners:
            created += extraction_job_ensure(
                organization_id=organization_id, client_id=client_id, end_user_id=end_user_id
            )
    # Orphans at once: their turns have waited a whole lost run already.
    published = _jobs_publish(
        ExtractionJob.objects.filter(status=ExtractionJob.Status.QUEUED).filter(
            Q(pk__in=orphaned) | Q(created_at__lt=now - older_than)
        )
    )
    return created + published


def _jobs_publish(jobs: QuerySet[ExtractionJob]) -> int:
    owners = jobs.values_list("pk", "organization_id", "end_user__user_id")
    return sum(extraction_job_publish(*owner) for owner in owners)
