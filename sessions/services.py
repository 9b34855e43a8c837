"""Writes of the conversation store. ``session_close`` is the one place a session closes."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
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
    session: Session
    messages: list[Message]
    session_created: bool


def _session_for_add(
    *, tenant: Tenant, end_user: EndUser, session_id: str | None, tag: str, now: datetime
) -> tuple[Session, bool]:
    """The session the turns go to, locked for this transaction; opened when new. Without a
    session_id: the user's open default conversation."""
    lookup = {"client": tenant.client, "end_user": end_user}
    if session_id is None:
        lookup.update(session_id__isnull=True, status=Session.Status.OPEN)
    else:
        lookup["session_id"] = session_id
    existing = Session.objects.select_for_update().filter(**lookup).first()
    if existing is not None:
        return existing, False
    try:
        with transaction.atomic():
            created = Session.objects.create(
                organization=tenant.organization,
                client=tenant.client,
                end_user=end_user,
                session_id=session_id,
                tag=tag,
                last_activity_at=now,
            )
        return created, True
    except IntegrityError:
        # A concurrent add opened it first; take theirs.
        return Session.objects.select_for_update().get(**lookup), False


@transaction.atomic
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
    """Store the turns, in the order given, after the session's earlier turns. Task-session
    turns are kept for skill learning and skip memory extraction."""
    now = timezone.now()
    session, created = _session_for_add(
        tenant=tenant,
        end_user=end_user,
        session_id=session_id,
        tag=tag or Session.Tag.CHAT,
        now=now,
    )
    if session.status == Session.Status.CLOSED:
        raise SessionClosedError(session.session_id)
    if tag is not None and tag != session.tag:
        raise SessionTagMismatchError(session.session_id)
    extraction = (
        Message.Extraction.SKIPPED
        if session.tag == Session.Tag.TASK
        else Message.Extraction.PENDING
    )
    rows = Message.objects.bulk_create(
        [
            Message(
                organization=tenant.organization,
                client=tenant.client,
                end_user=end_user,
                session=session,
                position=session.message_count + offset,
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
    session.message_count += len(rows)
    session.last_activity_at = now
    if filter_tags and not session.filter_tags:
        session.filter_tags = filter_tags
    session.save(update_fields=["message_count", "last_activity_at", "filter_tags"])
    return AddedMessages(session=session, messages=rows, session_created=created)


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
