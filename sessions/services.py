"""Writes of the conversation store. ``session_close`` is the one place a session closes; the
extraction state of turns changes only here (see ``Message``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from accounts.models import EndUser
from accounts.tenancy import Tenant
from sessions.content import MessageInput
from sessions.models import Message, Session
from sessions.signals import session_closed

logger = logging.getLogger(__name__)


class SessionClosedError(Exception):
    """The session is closed; it takes no more turns."""


class SessionTagMismatchError(Exception):
    """The caller named a tag (chat/task) other than the existing session's."""


@dataclass(frozen=True)
class AddedMessages:
    session_pk: int
    session_id: str | None
    tag: str
    messages: list[Message]
    session_created: bool
    extraction_pending: bool  # the turns wait for memory extraction (chat, not task, turns)


# Reserves positions for the new turns in an open session and stamps its activity, in one
# statement: the row lock it takes orders concurrent adds to the same session. Every add runs
# this, hence SQL (the ORM's select-then-update is two round trips and much query building).
_RESERVE_SQL = """
UPDATE conversations_session
   SET message_count = message_count + %(count)s, last_activity_at = %(now)s
 WHERE client_id = %(client_id)s AND end_user_id = %(end_user_id)s AND status = 'open'
   AND {session_match}
RETURNING id, message_count - %(count)s, tag
"""
_RESERVE_NAMED = _RESERVE_SQL.format(session_match="session_id = %(session_id)s")
_RESERVE_DEFAULT = _RESERVE_SQL.format(session_match="session_id IS NULL")


def _positions_reserve(
    *, tenant: Tenant, end_user: EndUser, session_id: str | None, count: int, now: datetime
) -> tuple[int, int, str] | None:
    """(session pk, first free position, tag) of the open session, or None if there is none."""
    with connection.cursor() as cursor:
        cursor.execute(
            _RESERVE_DEFAULT if session_id is None else _RESERVE_NAMED,
            {
                "count": count,
                "now": now,
                "client_id": tenant.client.pk,
                "end_user_id": end_user.pk,
                "session_id": session_id,
            },
        )
        return cursor.fetchone()


def _session_open(
    *,
    tenant: Tenant,
    end_user: EndUser,
    session_id: str | None,
    tag: str,
    count: int,
    filter_tags: dict[str, object],
    now: datetime,
) -> tuple[int, int, str] | None:
    """Open the session holding the first ``count`` turns; None when a concurrent add opened
    it first (the caller then reserves in theirs)."""
    try:
        with transaction.atomic():
            session = Session.objects.create(
                organization=tenant.organization,
                client=tenant.client,
                end_user=end_user,
                session_id=session_id,
                tag=tag,
                message_count=count,
                filter_tags=filter_tags,
                last_activity_at=now,
            )
    except IntegrityError:
        return None
    return session.pk, 0, tag


@transaction.atomic(savepoint=False)
def messages_add(
    *,
    tenant: Tenant,
    end_user: EndUser,
    session_id: str | None,
    tag: str | None,
    messages: list[MessageInput],
    filter_tags: dict[str, object],
    occurred_at: datetime | None,
) -> AddedMessages:
    """Store the turns, in the order given, after the session's earlier turns (opening the
    session if new; without a session_id, the user's open default conversation). Task-session
    turns are kept for skill learning and skip memory extraction. Raises SessionClosedError
    and SessionTagMismatchError, having stored nothing."""
    now = timezone.now()
    created = False
    reserved = _positions_reserve(
        tenant=tenant, end_user=end_user, session_id=session_id, count=len(messages), now=now
    )
    if reserved is None:
        if (
            session_id is not None
            and Session.objects.filter(
                client=tenant.client, end_user=end_user, session_id=session_id
            ).exists()
        ):
            raise SessionClosedError(session_id)  # it exists and is not open
        reserved = _session_open(
            tenant=tenant,
            end_user=end_user,
            session_id=session_id,
            tag=tag or Session.Tag.CHAT,
            count=len(messages),
            filter_tags=filter_tags,
            now=now,
        )
        created = reserved is not None
        if reserved is None:
            reserved = _positions_reserve(
                tenant=tenant,
                end_user=end_user,
                session_id=session_id,
                count=len(messages),
                now=now,
            )
        if reserved is None:
            raise SessionClosedError(session_id)  # opened and closed again meanwhile
    session_pk, first_position, session_tag = reserved
    if tag is not None and tag != session_tag:
        raise SessionTagMismatchError(session_id)
    extraction = (
        Message.Extraction.SKIPPED
        if session_tag == Session.Tag.TASK
        else Message.Extraction.PENDING
    )
    rows = Message.objects.bulk_create(
        [
            Message(
                organization=tenant.organization,
                client=tenant.client,
                end_user=end_user,
                session_id=session_pk,
                position=first_position + offset,
                role=message.role,
                content=message.parts,
                text=message.text,
                tool_calls=message.tool_calls,
                name=message.name,
                tool_call_id=message.tool_call_id,
                filter_tags=filter_tags,
                occurred_at=occurred_at or now,
                extraction=extraction,
            )
            for offset, message in enumerate(messages)
        ]
    )
    return AddedMessages(
        session_pk=session_pk,
        session_id=session_id,
        tag=session_tag,
        messages=rows,
        session_created=created,
        extraction_pending=bool(rows) and extraction == Message.Extraction.PENDING,
    )


@transaction.atomic
def session_close(*, session: Session, reason: str) -> Session:
    """Close the session (idempotent: closing a closed session changes nothing) and, after the
    commit, tell whoever listens (skill learning) through ``session_closed``."""
    locked = Session.objects.select_for_update().get(pk=session.pk)
    if locked.status == Session.Status.CLOSED:
        return locked
    locked.status = Session.Status.CLOSED
    locked.close_reason = reason
    locked.closed_at = timezone.now()
    locked.save(update_fields=["status", "close_reason", "closed_at"])
    transaction.on_commit(lambda: session_closed.send(sender=Session, session=locked))
    return locked


def sessions_close_idle(
    *, idle_for: timedelta, reason: str = Session.CloseReason.IDLE, now: datetime | None = None
) -> int:
    """Close every open session with no activity for ``idle_for`` (as of ``now``); returns
    how many closed. Each close is its own transaction: one failure does not undo the others."""
    cutoff = (now or timezone.now()) - idle_for
    closed = 0
    idle_ids = list(
        Session.objects.filter(status=Session.Status.OPEN, last_activity_at__lt=cutoff)
        .order_by("last_activity_at")
        .values_list("pk", flat=True)
    )
    for session in Session.objects.filter(pk__in=idle_ids).iterator(chunk_size=500):
        with transaction.atomic():
            locked = (
                Session.objects.select_for_update(skip_locked=True)
                .filter(pk=session.pk, status=Session.Status.OPEN, last_activity_at__lt=cutoff)
                .first()
            )
            if locked is None:
                continue  # got a new turn, or another sweeper has it
            session_close(session=locked, reason=reason)
            closed += 1
    return closed


# --- Extraction state (see Message): the memory app's worker advances it only through these,
# keyed like the reads in sessions.selectors (ids from one organization's job row, no tenant).
# Both run inside the worker's transaction, where savepoint=False keeps them to their own
# statements (a savepoint would add two round trips to every batch).


@transaction.atomic(savepoint=False)
def messages_mark_processed(*, message_ids: list[int], extracted_at: datetime) -> int:
    """Record that these turns' memories are stored: no job takes them again. Returns how
    many were marked."""
    return Message.objects.filter(pk__in=message_ids).update(
        extraction=Message.Extraction.PROCESSED, extracted_at=extracted_at
    )


@transaction.atomic(savepoint=False)
def messages_mark_attempt_failed(*, client_id: str, end_user_id: int, give_up_after: int) -> int:
    """Count a failed extraction attempt against every pending turn of the user; a turn that
    has now failed ``give_up_after`` times is marked failed and no job takes it again. The
    limit is the caller's: how patient extraction is belongs to the memory app. Returns how
    many turns were given up."""
    pending = Message.objects.filter(
        client_id=client_id, end_user_id=end_user_id, extraction=Message.Extraction.PENDING
    )
    pending.update(extraction_attempts=F("extraction_attempts") + 1)
    return pending.filter(extraction_attempts__gte=give_up_after).update(
        extraction=Message.Extraction.FAILED
    )
