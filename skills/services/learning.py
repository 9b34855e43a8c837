"""Skill learning's trigger: when a user's closed task sessions that no run has learned from
reach ``SKILL_TRIGGER_SESSION_THRESHOLD``, one learning run is queued for them.

Called from the sessions app's ``session_closed`` signal, after the close commits. Concurrent
closes each count, and several may find the threshold reached: the partial unique index "one
queued run per user" makes their inserts one run, and a session is attached to a run at most
once (its ``LearningRunSession`` is unique), so they all end in the same queued run holding
every session. Nothing locks ordinary message writes.
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction

from sessions.models import Session
from skills.models import LearningRun, LearningRunSession


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


def _queued_run(*, session: Session, trigger: str) -> LearningRun:
    """The user's queued run, created if there is none (one statement decides, under the
    partial unique index)."""
    owner = {
        "organization_id": session.organization_id,
        "client_id": session.client_id,
        "end_user_id": session.end_user_id,
    }
    for _attempt in range(3):
        LearningRun.objects.bulk_create(
            [LearningRun(**owner, trigger=trigger)], ignore_conflicts=True
        )
        queued = LearningRun.objects.filter(**owner, state=LearningRun.State.QUEUED).first()
        if queued is not None:
            return queued
        # Claimed between the insert and the read: the next insert queues a new one.
    raise RuntimeError(f"no queued learning run for end user {session.end_user_id}")


@transaction.atomic
def learning_run_trigger(*, session: Session) -> LearningRun | None:
    """After ``session`` closed: the queued run of its user, holding every closed task session
    no run has taken, once there are ``SKILL_TRIGGER_SESSION_THRESHOLD`` of them (a run already
    waiting takes the new ones whatever their number: it has not started); None while there
    are fewer, and for chat sessions (they never count)."""
    if session.tag != Session.Tag.TASK:
        return None
    unlearned = _unlearned_sessions(client_id=session.client_id, end_user_id=session.end_user_id)
    waiting = LearningRun.objects.filter(
        client_id=session.client_id, end_user_id=session.end_user_id, state=LearningRun.State.QUEUED
    ).exists()
    if not waiting and len(unlearned) < settings.SKILL_TRIGGER_SESSION_THRESHOLD:
        return None
    run = _queued_run(session=session, trigger=LearningRun.Trigger.THRESHOLD)
    LearningRunSession.objects.bulk_create(
        [
            LearningRunSession(
                organization_id=run.organization_id,
                client_id=run.client_id,
                end_user_id=run.end_user_id,
                run=run,
                session=unlearned_session,
            )
            for unlearned_session in unlearned
        ],
        ignore_conflicts=True,
    )
    return run
