"""Writes of the conversation store. ``session_close`` is the one place a session closes; the
extraction state of turns changes only here (see ``Message``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from accounts.models import EndUser
from accounts.tenancy import Tenant
from images.models import ImageFetch, ImageObject
from images.services import image_fetch_publish, image_store, images_hold, images_release
from mirix_site.common.database import prepared_cursor
from mirix_site.common.errors import ConflictError, InvalidInputError, NotFoundError
from mirix_site.common.rows import rows_insert
from sessions.content import MessageInput
from sessions.models import Message, MessageImage, Session
from sessions.signals import session_closed

logger = logging.getLogger(__name__)


class SessionClosedError(ConflictError):
    """The session is closed; it takes no more turns."""

    code = "session_closed"

    def __init__(self, session_id: str | None) -> None:
        super().__init__("This session is closed; start a new session_id.")
        self.session_id = session_id


class SessionTagMismatchError(ConflictError):
    """The caller named a tag (chat/task) other than the existing session's."""

    code = "session_tag_mismatch"

    def __init__(self, session_id: str | None) -> None:
        super().__init__("This session_id names a session of the other tag (chat/task).")
        self.session_id = session_id


class MessageImageMissingError(NotFoundError):
    """A turn names an image (``image_id``) the organization does not have: a reference to
    nothing, answered as any missing object is (another organization's image alike)."""


@dataclass(frozen=True)
class AddedMessages:
    session_pk: int
    session_id: str | None
    tag: str
    messages: list[Message]
    session_created: bool
    extraction_pending: bool  # the turns wait for memory extraction (chat, not task, turns)
    stored: int  # rows written; the other turns were stored before (their client_message_id)


# Reserves positions for the new turns in an open session and stamps its activity, in one
# statement: the row lock it takes orders concurrent adds to the same session. Every add runs
# this, hence SQL (the ORM's select-then-update is two round trips and much query building).
_RESERVE_SQL = """
UPDATE conversations_session
   SET message_count = message_count + %(count)s, last_activity_at = %(now)s,
       tools = tools || %(tools)s::jsonb
 WHERE client_id = %(client_id)s AND end_user_id = %(end_user_id)s AND status = 'open'
   AND {session_match}
RETURNING id, message_count - %(count)s, tag
"""
_RESERVE_NAMED = _RESERVE_SQL.format(session_match="session_id = %(session_id)s")
_RESERVE_DEFAULT = _RESERVE_SQL.format(session_match="session_id IS NULL")


def _positions_reserve(
    *,
    tenant: Tenant,
    end_user: EndUser,
    session_id: str | None,
    count: int,
    tools: dict[str, str],
    now: datetime,
) -> tuple[int, int, str] | None:
    """(session pk, first free position, tag) of the open session, or None if there is none;
    the tools declared join the session's."""
    with prepared_cursor() as cursor:
        cursor.execute(
            _RESERVE_DEFAULT if session_id is None else _RESERVE_NAMED,
            {
                "count": count,
                "now": now,
                "client_id": tenant.client.pk,
                "end_user_id": end_user.pk,
                "session_id": session_id,
                "tools": json.dumps(tools),
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
    tools: dict[str, str],
    now: datetime,
) -> tuple[int, int, str] | None:
    """Open the session holding the first ``count`` turns; None when the session exists
    already: a concurrent add opened it first (the caller then reserves in it), or, named, it
    is closed."""
    session = Session(
        organization=tenant.organization,
        client=tenant.client,
        end_user=end_user,
        session_id=session_id,
        tag=tag,
        message_count=count,
        filter_tags=filter_tags,
        tools=tools,
        last_activity_at=now,
    )
    try:
        with transaction.atomic():
            # One prepared statement (the ORM's insert, built anew each time, was a twentieth
            # of an add's web CPU in a run opening a session every 13 adds: bench/RESULTS.md).
            rows_insert(model=Session, instances=[session])
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
    tools: dict[str, str] | None = None,
) -> AddedMessages:
    """Store the turns, in the order given, after the session's earlier turns (opening the
    session if new; without a session_id, the user's open default conversation). Task-session
    turns are kept for skill learning and skip memory extraction. Inline images are stored,
    named ones checked, remote ones queued for the worker to fetch once the turns commit.
    ``tools`` (name → description, as declared) join the session's, a name declared again
    replacing its description. Raises SessionClosedError, SessionTagMismatchError and
    MessageImageMissingError, having stored nothing.

    A turn with a ``client_message_id`` the client already stored for this user (or sent
    earlier in the same call) is not stored again: its stored row stands in its place in
    ``messages``, wherever it was stored, so that a retry is answered as the first call was.
    A concurrent call storing the same id makes the insert fail on
    ``MESSAGE_CLIENT_ID_UNIQUE`` (an ``IntegrityError``): the caller's transaction is
    rolled back and run again (``memory.services.ingest``), and then finds the row."""
    known = _messages_known(tenant=tenant, end_user=end_user, messages=messages)
    fresh = _messages_fresh(messages, known)
    if not fresh:
        return _messages_stored_before(session_id, messages, known)
    now = timezone.now()
    created = False
    tools = tools or {}
    reserve = partial(
        _positions_reserve,
        tenant=tenant,
        end_user=end_user,
        session_id=session_id,
        count=len(fresh),
        tools=tools,
        now=now,
    )
    reserved = reserve()
    if reserved is None:
        # None open: open it. A named session that exists already (closed, or opened by a
        # concurrent add that has committed since the reservation looked) refuses the insert,
        # and the reservation is tried again: open, it takes the turns; closed, 409.
        reserved = _session_open(
            tenant=tenant,
            end_user=end_user,
            session_id=session_id,
            tag=tag or Session.Tag.CHAT,
            count=len(fresh),
            filter_tags=filter_tags,
            tools=tools,
            now=now,
        )
        created = reserved is not None
        if reserved is None:
            reserved = reserve()
        if reserved is None:
            raise SessionClosedError(session_id)
    session_pk, first_position, session_tag = reserved
    if tag is not None and tag != session_tag:
        raise SessionTagMismatchError(session_id)
    images = _message_images_resolve(tenant=tenant, messages=fresh)
    extraction = (
        Message.Extraction.SKIPPED
        if session_tag == Session.Tag.TASK
        else Message.Extraction.PENDING
    )
    rows = [
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
            client_message_id=message.client_message_id,
            filter_tags=filter_tags,
            occurred_at=message.occurred_at or occurred_at or now,
            extraction=extraction,
        )
        for offset, message in enumerate(fresh)
    ]
    # Not bulk_create: its UNNEST of one typed array per column, built through the ORM's
    # compiler, was a tenth of an add's web CPU (bench/RESULTS.md).
    rows_insert(model=Message, instances=rows)
    _message_images_link(tenant=tenant, end_user=end_user, rows=rows, images=images)
    return AddedMessages(
        session_pk=session_pk,
        session_id=session_id,
        tag=session_tag,
        messages=_messages_in_order(messages, rows, known),
        session_created=created,
        extraction_pending=bool(rows) and extraction == Message.Extraction.PENDING,
        stored=len(rows),
    )


def _messages_known(
    *, tenant: Tenant, end_user: EndUser, messages: list[MessageInput]
) -> dict[str, Message]:
    """The client's stored turns of this user that the call's turns name by their own id."""
    ids = {message.client_message_id for message in messages if message.client_message_id}
    if not ids:
        return {}
    rows = Message.objects.filter(
        client=tenant.client, end_user=end_user, client_message_id__in=ids
    ).select_related("session")
    return {row.client_message_id: row for row in rows}


def _messages_fresh(messages: list[MessageInput], known: dict[str, Message]) -> list[MessageInput]:
    """The turns to store: those without an id, and the first of each id not stored before."""
    fresh, seen = [], set(known)
    for message in messages:
        if message.client_message_id:
            if message.client_message_id in seen:
                continue
            seen.add(message.client_message_id)
        fresh.append(message)
    return fresh


def _messages_in_order(
    messages: list[MessageInput], rows: list[Message], known: dict[str, Message]
) -> list[Message]:
    """A row for each turn sent, in order: the new rows (``rows``, stored in the order of the
    fresh turns) and, for a turn whose id was stored before, that row."""
    stored = dict(known)
    new = iter(rows)
    ordered = []
    for message in messages:
        row = stored.get(message.client_message_id) if message.client_message_id else None
        if row is None:
            row = next(new)
            if message.client_message_id:
                stored[message.client_message_id] = row
        ordered.append(row)
    return ordered


def _messages_stored_before(
    session_id: str | None, messages: list[MessageInput], known: dict[str, Message]
) -> AddedMessages:
    """Every turn was stored before (a retry): the stored rows, nothing written."""
    rows = _messages_in_order(messages, [], known)
    first = rows[0]
    return AddedMessages(
        session_pk=first.session_id,
        session_id=session_id,
        tag=first.session.tag,
        messages=rows,
        session_created=False,
        extraction_pending=False,
        stored=0,
    )


def _message_images_resolve(
    *, tenant: Tenant, messages: list[MessageInput]
) -> dict[str, ImageObject]:
    """The images the turns show, by hash: inline ones stored now, named ones held against
    release until commit. Raises MessageImageMissingError for a name the organization has
    no image of."""
    images: dict[str, ImageObject] = {}
    for message in messages:
        for sha256, valid in message.inline_images.items():
            if sha256 not in images:
                images[sha256] = image_store(
                    organization=tenant.organization, client=tenant.client, image=valid
                )
    named = {sha for message in messages for sha in message.image_ids} - images.keys()
    images |= images_hold(organization=tenant.organization, sha256s=named)
    missing = [
        part["image_id"]
        for message in messages
        for part in message.parts
        if part["type"] == "image" and part["image_id"] not in images
    ]
    if missing:
        raise MessageImageMissingError(missing[0])
    return images


def _message_images_link(
    *, tenant: Tenant, end_user: EndUser, rows: list[Message], images: dict[str, ImageObject]
) -> None:
    """A link row per image part of the stored turns; a remote URL's link waits on a fetch,
    queued once the turns commit."""
    owner = {"organization": tenant.organization, "client": tenant.client}
    links: list[MessageImage] = []
    fetches: list[ImageFetch] = []
    for row in rows:
        for part_index, part in enumerate(row.content):
            link = MessageImage(**owner, end_user=end_user, message=row, part=part_index)
            if part["type"] == "image":
                link.image = images[part["image_id"]]
            elif part["type"] == "image_url":
                link.fetch = ImageFetch(**owner, url=part["image_url"]["url"])
                fetches.append(link.fetch)
            else:
                continue
            links.append(link)
    if not links:
        return
    ImageFetch.objects.bulk_create(fetches)
    for link in links:
        link.fetch_id = link.fetch.pk if link.fetch is not None else None
    MessageImage.objects.bulk_create(links)
    for fetch in fetches:
        transaction.on_commit(
            partial(image_fetch_publish, fetch_id=fetch.pk, organization_id=fetch.organization_id)
        )


@transaction.atomic
def message_images_fetched(*, fetch: ImageFetch) -> int:
    """A remote image of some turns arrived: their links now name it. Returns how many."""
    if fetch.image_id is None:
        return 0
    return MessageImage.objects.filter(fetch=fetch, image__isnull=True).update(
        image_id=fetch.image_id
    )


def message_image_unlinked(*, link: MessageImage) -> None:
    """A link row went (its message, session, user or organization deleted): its fetch goes
    with it, and its image if nothing names it any more."""
    if link.fetch_id is not None:
        ImageFetch.objects.filter(pk=link.fetch_id).delete()
    if link.image_id is not None:
        images_release(image_ids=[link.image_id])


class SessionOutcomeConflictError(ConflictError):
    """The session closed stating another outcome or note (or none) than this close states:
    what it stated is what learning and the skills it used have counted, so it stays."""

    code = "session_outcome_conflict"

    def __init__(self, session_id: str | None) -> None:
        super().__init__(
            "This session is closed with another outcome or note than this close states; "
            "a closed session's outcome does not change."
        )
        self.session_id = session_id


def _outcome_check(*, session: Session, outcome: str | None, note: str | None) -> None:
    """Raises InvalidInputError for an outcome or note stated on a chat session: they say how
    a task went, and only task sessions are learned from."""
    if session.tag == Session.Tag.TASK:
        return
    stated = {"outcome": outcome, "note": note}
    fields = {
        name: ["Only a task session (session_tag task) states an outcome or note on closing."]
        for name, value in stated.items()
        if value is not None
    }
    if fields:
        raise InvalidInputError(fields)


@transaction.atomic
def session_close(
    *, session: Session, reason: str, outcome: str | None = None, note: str | None = None
) -> Session:
    """Close the session (idempotent: closing a closed session changes nothing) and, after the
    commit, tell whoever listens (skill learning) through ``session_closed``.

    A task session's closer may state how the work went (``outcome``, an ``Outcome``) and
    what it says of it (``note``; blank is none); the distiller and the skills the session
    used read them. Closing again repeats what was stated or states nothing: a close stating
    another outcome or note than the stored ones raises SessionOutcomeConflictError, since
    the first close's outcome may already be counted. A chat session takes neither
    (InvalidInputError)."""
    note = note if note and note.strip() else None
    locked = Session.objects.select_for_update().get(pk=session.pk)
    _outcome_check(session=locked, outcome=outcome, note=note)
    if locked.status == Session.Status.CLOSED:
        if (outcome is not None and outcome != locked.outcome) or (
            note is not None and note != locked.note
        ):
            raise SessionOutcomeConflictError(locked.session_id)
        return locked
    locked.status = Session.Status.CLOSED
    locked.close_reason = reason
    locked.closed_at = timezone.now()
    locked.outcome = outcome
    locked.note = note
    locked.save(update_fields=["status", "close_reason", "closed_at", "outcome", "note"])
    transaction.on_commit(lambda: session_closed.send(sender=Session, session=locked))
    return locked


# How often a long sweep reports progress (sessions done).
PROGRESS_EVERY = 500


def sessions_close_idle(
    *,
    idle_for: timedelta,
    reason: str = Session.CloseReason.IDLE,
    now: datetime | None = None,
    dry_run: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
) -> int:
    """Close every open session with no activity for ``idle_for`` (as of ``now``); returns
    how many closed (``dry_run``: how many would, closing none). Each close is its own
    transaction: one failure does not undo the others. ``on_progress(done, total)`` is called
    every PROGRESS_EVERY sessions."""
    cutoff = (now or timezone.now()) - idle_for
    closed = 0
    idle_ids = list(
        Session.objects.filter(status=Session.Status.OPEN, last_activity_at__lt=cutoff)
        .order_by("last_activity_at")
        .values_list("pk", flat=True)
    )
    if dry_run:
        return len(idle_ids)
    sessions = Session.objects.filter(pk__in=idle_ids).iterator(chunk_size=PROGRESS_EVERY)
    for done, session in enumerate(sessions, start=1):
        with transaction.atomic():
            locked = (
                Session.objects.select_for_update(skip_locked=True)
                .filter(pk=session.pk, status=Session.Status.OPEN, last_activity_at__lt=cutoff)
                .first()
            )
            if locked is not None:  # else: got a new turn, or another sweeper has it
                session_close(session=locked, reason=reason)
                closed += 1
        if on_progress is not None and done % PROGRESS_EVERY == 0:
            on_progress(done, len(idle_ids))
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
