"""Reads of the conversation store; every read a caller makes takes the tenant first."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import NamedTuple

from django.db import connection
from django.db.models import Case, IntegerField, Prefetch, Q, QuerySet, Value, When

from accounts.models import EndUser
from accounts.tenancy import Tenant
from mirix_site.common.counts import TableCount, table_count
from sessions.models import Message, MessageImage, Session


def session_list(*, tenant: Tenant, end_user: EndUser) -> QuerySet[Session]:
    """The user's sessions written by this client or by clients it may read."""
    return Session.objects.readable_by(tenant, end_user=end_user)


# The name of a default conversation (turns sent without a session_id, as the MIRIX client
# sends them), which has no caller id: "default.<its number>", outside session_id's pattern so
# that it names no caller's session; "default" alone, when the user has no session of that
# name, is the latest.
_DEFAULT_NAMED = re.compile(r"default\.([1-9][0-9]{0,17})")


def session_name(session: Session) -> str:
    """How reads name the session: its caller id, or a default conversation's name."""
    return session.session_id or f"default.{session.pk}"


def _named(sessions: QuerySet[Session], session_id: str) -> QuerySet[Session]:
    numbered = _DEFAULT_NAMED.fullmatch(session_id)
    if numbered:
        return sessions.filter(session_id__isnull=True, pk=int(numbered.group(1)))
    named = sessions.filter(session_id=session_id)
    if session_id == "default" and not named.exists():
        return sessions.filter(session_id__isnull=True)
    return named


def session_get(*, tenant: Tenant, end_user: EndUser, session_id: str) -> Session:
    """The session with this caller id (or a default conversation's name, ``session_name``),
    the caller's own first when a client in its read scopes used the same id. Raises
    ``Session.DoesNotExist``."""
    own_first = Case(
        When(client_id=tenant.client.pk, then=Value(0)),
        default=Value(1),
        output_field=IntegerField(),
    )
    session = (
        _named(session_list(tenant=tenant, end_user=end_user), session_id)
        .order_by(own_first, "-created_at")
        .first()
    )
    if session is None:
        raise Session.DoesNotExist(session_id)
    return session


def session_get_own(*, tenant: Tenant, end_user: EndUser, session_id: str) -> Session:
    """The caller's own session (for writes such as close), by its caller id or a default
    conversation's name. Raises ``Session.DoesNotExist``."""
    session = (
        _named(Session.objects.owned_by(tenant, end_user=end_user), session_id)
        .order_by("-created_at")
        .first()
    )
    if session is None:
        raise Session.DoesNotExist(session_id)
    return session


def message_list(*, tenant: Tenant, session: Session) -> QuerySet[Message]:
    """The session's turns in the order they were sent."""
    links = MessageImage.objects.select_related("image", "fetch").order_by("part")
    return (
        Message.objects.readable_by(tenant)
        .filter(session=session)
        .prefetch_related(Prefetch("images", queryset=links))
        .order_by("position")
    )


# --- Extraction state (see Message): the memory app's worker reads turns only through these.
# Not a caller's reads, hence no tenant: the worker keys them by ids from one organization's
# job row (an end user, a session, a turn belongs to one organization). An organization
# predicate would add no safety and, measured, makes PostgreSQL AND its organization index
# into the pending count and the preceding-turn plans.


class PendingOwner(NamedTuple):
    """Whose turns wait for extraction: the ids an extraction job is keyed by."""

    organization_id: str
    client_id: str
    end_user_id: int


class PendingSize(NamedTuple):
    """How much of a user's pending work one batch would take: its turns and their text."""

    messages: int
    chars: int


# One statement, each user's first ``limit`` pending turns read through the partial index of
# pending turns (message_pending_by_user) and no more: the most one batch takes. Run while the
# extraction claim chooses its jobs: it decides how many jobs share a run.
_PENDING_SIZES_SQL = f"""
SELECT owner.client_id, owner.end_user_id, count(*), coalesce(sum(length(turn.text)), 0)
  FROM unnest(%(client_ids)s::varchar[], %(end_user_ids)s::bigint[])
           AS owner (client_id, end_user_id)
  CROSS JOIN LATERAL (
        SELECT text FROM {Message._meta.db_table}
         WHERE extraction = 'pending' AND end_user_id = owner.end_user_id
           AND client_id = owner.client_id
         ORDER BY id LIMIT %(limit)s) AS turn
 GROUP BY owner.client_id, owner.end_user_id
"""  # noqa: S608  (the table name comes from model metadata; every value is bound)


def messages_pending_sizes(
    *, owners: list[tuple[str, int]], limit: int
) -> dict[tuple[str, int], PendingSize]:
    """The size of the first ``limit`` turns waiting for extraction of each (client id, end
    user id) of ``owners``; one with none is absent."""
    with connection.cursor() as cursor:
        cursor.execute(
            _PENDING_SIZES_SQL,
            {
                "client_ids": [client_id for client_id, _user_id in owners],
                "end_user_ids": [user_id for _client_id, user_id in owners],
                "limit": limit,
            },
        )
        return {
            (client_id, user_id): PendingSize(messages, chars)
            for client_id, user_id, messages, chars in cursor.fetchall()
        }


def messages_pending_lock(*, client_id: str, end_user_id: int, limit: int) -> list[Message]:
    """The user's oldest ``limit`` pending turns, locked until the caller's transaction ends.
    Turns another transaction holds are skipped, not waited for: two workers never extract
    the same turn, and neither blocks on the other. Call inside ``transaction.atomic``."""
    return list(
        Message.objects.select_for_update(skip_locked=True)
        .filter(client_id=client_id, end_user_id=end_user_id, extraction=Message.Extraction.PENDING)
        .order_by("id")[:limit]
    )


def messages_preceding_get(*, messages: list[Message]) -> dict[int, Message]:
    """Per session of ``messages``, its last turn before the first of them (system prompts
    aside): what a session's first exchange among ``messages`` replies to. Sessions with no
    earlier turn are absent. One query."""
    firsts: dict[int, int] = {}
    for message in messages:
        first = firsts.get(message.session_id, message.position)
        firsts[message.session_id] = min(first, message.position)
    if not firsts:
        return {}
    condition = Q()
    for session_id, position in firsts.items():
        condition |= Q(session_id=session_id, position__lt=position)
    rows = (
        Message.objects.filter(condition)
        .exclude(role=Message.Role.SYSTEM)
        .order_by("session_id", "-position")
        .distinct("session_id")
    )
    return {row.session_id: row for row in rows}


def messages_pending_owners_list(*, created_before: datetime) -> list[PendingOwner]:
    """Everyone, in every organization, with a turn pending since before ``created_before``:
    the recovery job's look for work whose extraction job was never written or was lost."""
    return [
        PendingOwner(*row)
        for row in Message.objects.filter(
            extraction=Message.Extraction.PENDING, created_at__lt=created_before
        )
        # Without clearing Meta.ordering its columns join the DISTINCT: one row per turn.
        .order_by()
        .values_list("organization_id", "client_id", "end_user_id")
        .distinct()
    ]


def message_image_ids(*, message_ids: Iterable[int]) -> dict[int, list[str]]:
    """The stored images (their hashes, in part order) of each of these turns that shows any.
    The turns' ids come from rows the caller already reads (a memory's provenance)."""
    ids = sorted(set(message_ids))
    shown: dict[int, list[str]] = {}
    if not ids:
        return shown
    links = (
        MessageImage.objects.filter(message_id__in=ids, image__isnull=False)
        .order_by("message_id", "part")
        .values_list("message_id", "image__sha256")
    )
    for message_id, sha256 in links:
        shown.setdefault(message_id, []).append(sha256)
    return shown


def messages_showing(*, tenant: Tenant, end_user: EndUser, image_ids: Iterable[str]) -> list[int]:
    """The ids of the user's turns the tenant may read that show one of these images."""
    return list(
        MessageImage.objects.readable_by(tenant, end_user=end_user)
        .filter(image__organization=tenant.organization, image__sha256__in=set(image_ids))
        .values_list("message_id", flat=True)
        .distinct()
    )


def sessions_by_status() -> dict[str, TableCount]:
    """Every tenant's sessions, open and closed: the open ones counted on their own index (the
    idle sweeper's), the closed ones the rest of the table."""
    open_count = Session.objects.filter(status=Session.Status.OPEN).count()
    total = table_count(Session)
    closed = TableCount(max(total.value - open_count, 0), estimated=total.estimated)
    return {"open": TableCount(open_count, estimated=False), "closed": closed}


def turns_waiting() -> tuple[int, datetime | None]:
    """Every tenant's chat turns waiting for extraction, and when the oldest arrived (their
    partial index answers both)."""
    waiting = Message.objects.filter(extraction=Message.Extraction.PENDING)
    oldest = waiting.order_by("created_at").values_list("created_at", flat=True).first()
    return waiting.count(), oldest
