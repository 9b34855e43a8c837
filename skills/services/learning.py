"""Skill learning's trigger: when a user's closed task sessions that no run has learned from
reach ``SKILL_TRIGGER_SESSION_THRESHOLD``, one learning run is queued for them.

Called from the sessions app's ``session_closed`` signal, after the close commits. Concurrent
closes each count, and several may find the threshold reached: the partial unique index "one
queued run per user" makes their inserts one run, and a session is attached to a run at most
once (its ``LearningRunSession`` is unique), so they all end in the same queued run holding
every session. Nothing locks ordinary message writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, Max

from accounts.models import EndUser
from accounts.tenancy import Tenant
from mirix_site.common.errors import ConflictError, ReadOnlyError
from mirix_site.common.publish import task_labels, task_publish
from sessions.models import Session
from skills.models import LESSONS_WAITING, Experience, LearningRun, LearningRunSession

# The learning run's task (``skills.tasks``), queued by its name.
LEARNING_RUN_TASK = "skills.tasks.learning_run_task"
# The final states a run may be retried from: it stopped before learning from everything.
RETRYABLE = (
    LearningRun.State.FAILED,
    LearningRun.State.CONTEXT_LIMIT,
    LearningRun.State.BUDGET_EXHAUSTED,
)


class LearningRunConflictError(ConflictError):
    """The run cannot do what was asked in its state (the message says why)."""


class LearningRunReadOnlyError(ReadOnlyError):
    """Another client's run: readable through a read scope, not changeable."""


def _unlearned_sessions(*, client_id: str, end_user_id: int) -> list[Session]:
    """The user's closed task sessions of this client that no run has taken, oldest first."""
    return list(
        Session.objects.filter(
            client_id=client_id,
            end_user_id=end_user_id,
            tag=Session.Tag.TASK,
            status=Session.Status.CLOSED,
        )
        .exclude(pk__in=LearningRunSession.objects.values("session_id"))
        .order_by("closed_at", "pk")
    )


def learning_run_queued(*, client_id: str, end_user_id: int) -> LearningRun | None:
    """The user's queued run, if there is one (at most one: the partial unique index)."""
    return LearningRun.objects.filter(
        client_id=client_id, end_user_id=end_user_id, state=LearningRun.State.QUEUED
    ).first()


def _queued_run(*, owner: dict[str, object], trigger: str) -> LearningRun:
    """The user's queued run, created if there is none (one statement decides, under the
    partial unique index)."""
    for _attempt in range(3):
        LearningRun.objects.bulk_create(
            [LearningRun(**owner, trigger=trigger)], ignore_conflicts=True
        )
        queued = learning_run_queued(client_id=owner["client_id"], end_user_id=owner["end_user_id"])
        if queued is not None:
            return queued
        # Claimed between the insert and the read: the next insert queues a new one.
    raise RuntimeError(f"no queued learning run for end user {owner['end_user_id']}")


@transaction.atomic
def learning_run_trigger(*, session: Session) -> LearningRun | None:
    """After ``session`` closed: the queued run of its user, holding every closed task session
    no run has taken, once there are ``SKILL_TRIGGER_SESSION_THRESHOLD`` of them (a run already
    waiting takes the new ones whatever their number: it has not started); None while there
    are fewer, and for chat sessions (they never count)."""
    if session.tag != Session.Tag.TASK:
        return None
    unlearned = _unlearned_sessions(client_id=session.client_id, end_user_id=session.end_user_id)
    waiting = (
        learning_run_queued(client_id=session.client_id, end_user_id=session.end_user_id)
        is not None
    )
    if not waiting and len(unlearned) < settings.SKILL_TRIGGER_SESSION_THRESHOLD:
        return None
    owner = session.owner_ids
    run = _queued_run(owner=owner, trigger=LearningRun.Trigger.THRESHOLD)
    _sessions_attach(run=run, sessions=unlearned)
    if not waiting:  # a run that waited was sent when it was queued
        learning_run_publish(run)
    return run


def learning_run_publish(run: LearningRun, *, countdown: float | None = None) -> None:
    """Send the run to a worker once the transaction that queued it commits (at once outside
    one), labelled with its organization and user: once per queuing, again when a run of the
    user that was running when it came ends (``skills.learning.runs.run_finish``), for each
    slice of a long run (``countdown``: not before that many seconds); the beat sends it again
    if a message is lost."""
    run_id = run.pk
    labels = task_labels(organization_id=run.organization_id, user_id=run.end_user.user_id)
    transaction.on_commit(
        lambda: task_publish(LEARNING_RUN_TASK, run_id, labels=labels, countdown=countdown)
    )


def _sessions_attach(*, run: LearningRun, sessions: list[Session]) -> None:
    """The sessions join the run, those another run took meanwhile excepted."""
    LearningRunSession.objects.bulk_create(
        [
            LearningRunSession(
                organization_id=run.organization_id,
                client_id=run.client_id,
                end_user_id=run.end_user_id,
                run=run,
                session=session,
            )
            for session in sessions
        ],
        ignore_conflicts=True,
    )


@dataclass(frozen=True)
class LearningRunPlan:
    """What a run of the user requested now would learn from: the closed task sessions no run
    has taken (they join it), the run already waiting (None: a new one is queued), and the
    lessons earlier runs distilled that no curator has placed yet (pending or pooled), which
    every run of the user reads."""

    sessions: list[Session]
    waiting: LearningRun | None
    lessons: list[Experience]

    @property
    def learnable(self) -> bool:
        return self.waiting is not None or bool(self.sessions)


def learning_run_plan(*, tenant: Tenant, end_user: EndUser) -> LearningRunPlan:
    """What ``learning_run_request`` would do for the user, read and changed nothing."""
    return LearningRunPlan(
        sessions=_unlearned_sessions(client_id=tenant.client.pk, end_user_id=end_user.pk),
        waiting=learning_run_queued(client_id=tenant.client.pk, end_user_id=end_user.pk),
        lessons=list(
            Experience.objects.filter(
                client_id=tenant.client.pk, end_user_id=end_user.pk, status__in=LESSONS_WAITING
            ).order_by("pk")
        ),
    )


@transaction.atomic
def learning_run_request(*, tenant: Tenant, end_user: EndUser) -> tuple[LearningRun, bool]:
    """Queue a run of the user now, whatever the threshold: (the run, whether it is new). A run
    already waiting is returned, with the sessions closed since joined to it. Raises
    LearningRunConflictError when no closed task session is left to learn from."""
    plan = learning_run_plan(tenant=tenant, end_user=end_user)
    if not plan.learnable:
        raise LearningRunConflictError(
            "No closed task session of this user is left to learn from.", code="nothing_to_learn"
        )
    owner = tenant.owner_ids(end_user)
    run = plan.waiting or _queued_run(owner=owner, trigger=LearningRun.Trigger.REQUEST)
    _sessions_attach(run=run, sessions=plan.sessions)
    if plan.waiting is None:
        learning_run_publish(run)
    return run, plan.waiting is None


@dataclass(frozen=True)
class LearningDue:
    """A user (of a client) whose closed task sessions call for a run the trigger did not
    queue: one of those sessions, how many there are, and whether a run of theirs waits."""

    session: Session
    unlearned: int
    waiting: bool


def learning_due() -> list[LearningDue]:
    """The users whose closed task sessions that no run has taken meet the trigger's rule
    (``learning_run_trigger``: ``SKILL_TRIGGER_SESSION_THRESHOLD`` of them, or any while a run
    of theirs waits), each with the newest of those sessions. A close queues the run itself;
    these are left when the trigger failed after a close committed, until the user's next
    close. The trigger called with the session decides again."""
    groups = (
        Session.objects.filter(tag=Session.Tag.TASK, status=Session.Status.CLOSED)
        .exclude(pk__in=LearningRunSession.objects.values("session_id"))
        .values("client_id", "end_user_id")
        .annotate(unlearned=Count("pk"), newest=Max("pk"))
        .order_by("client_id", "end_user_id")
    )
    waiting = set(
        LearningRun.objects.filter(state=LearningRun.State.QUEUED).values_list(
            "client_id", "end_user_id"
        )
    )
    due = {
        group["newest"]: (group["unlearned"], (group["client_id"], group["end_user_id"]) in waiting)
        for group in groups
    }
    due = {
        newest: (unlearned, queued)
        for newest, (unlearned, queued) in due.items()
        if queued or unlearned >= settings.SKILL_TRIGGER_SESSION_THRESHOLD
    }
    sessions = Session.objects.filter(pk__in=list(due)).select_related("end_user", "client")
    return [
        LearningDue(session=session, unlearned=due[session.pk][0], waiting=due[session.pk][1])
        for session in sessions.order_by("client_id", "end_user_id")
    ]


@transaction.atomic
def learning_run_retry(*, tenant: Tenant, run: LearningRun) -> LearningRun:
    """Queue a run that stopped short (failed, context limit, budget) again, with its
    sessions. Raises LearningRunReadOnlyError for another client's run and
    LearningRunConflictError for a run in another state or a user with a run waiting."""
    if not tenant.owns(run):
        raise LearningRunReadOnlyError(run.pk)
    retried = LearningRun.objects.filter(pk=run.pk, state__in=RETRYABLE)
    if not retried.exists():
        raise LearningRunConflictError(
            f"Only a run that stopped short is retried; this one is {run.state}.",
            code="not_retryable",
        )
    try:
        with transaction.atomic():  # a run of the user queued meanwhile: the index refuses
            retried.update(
                state=LearningRun.State.QUEUED, error="", finished_at=None, heartbeat_at=None
            )
    except IntegrityError:
        raise LearningRunConflictError(
            "A run of this user is queued already.", code="not_retryable"
        ) from None
    run.refresh_from_db()
    learning_run_publish(run)
    return run


@transaction.atomic
def learning_run_dream(
    *, tenant: Tenant, end_user: EndUser, last_n: int, dry_run: bool
) -> dict[str, object]:
    """Auto-dream, procedural mode: learn from the user's last ``last_n`` closed task sessions
    no run has taken (a run queued for them, or the one already waiting joined by them).
    ``dry_run``: say which sessions and run that would be, and change nothing."""
    unlearned = _unlearned_sessions(client_id=tenant.client.pk, end_user_id=end_user.pk)
    chosen = unlearned[-last_n:]
    owner = tenant.owner_ids(end_user)
    waiting = learning_run_queued(client_id=tenant.client.pk, end_user_id=end_user.pk)
    report: dict[str, object] = {
        "session_ids": [session.session_id for session in chosen],
        "session_count": len(chosen),
        "unlearned_sessions": len(unlearned),
    }
    if not chosen:
        return {**report, "status": "nothing_to_learn", "run_id": None}
    if dry_run:
        return {
            **report,
            "status": "would_queue",
            "run_id": str(waiting.pk) if waiting else None,
        }
    run = waiting or _queued_run(owner=owner, trigger=LearningRun.Trigger.AUTO_DREAM)
    _sessions_attach(run=run, sessions=chosen)
    if waiting is None:
        learning_run_publish(run)
    return {**report, "status": "queued", "run_id": str(run.pk)}
