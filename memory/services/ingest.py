"""``/memory/add``: store the turns, then queue their extraction after the commit."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from accounts.services import end_user_create_or_get
from accounts.tenancy import Tenant
from memory.models import MetaAgent
from memory.services.extraction import extraction_job_ensure
from mirix_site.common.database import atomic_run_again, prepared_cursor
from sessions.content import MessageInput
from sessions.models import MESSAGE_CLIENT_ID_UNIQUE, Message, Session
from sessions.services import messages_add


@dataclass(frozen=True)
class IngestResult:
    session_id: str | None
    messages: list[Message]
    meta_agent_id: str | None
    extraction_queued: bool
    stored: int  # turns written; the others were stored before (their client_message_id)


# Every add asks only whether the client has a meta agent and its id: one lean statement (the
# ORM's get of the whole row cost as much web CPU as the add's three writes; bench/RESULTS.md).
_META_AGENT_ID_SQL = (
    f"SELECT {MetaAgent._meta.pk.column} FROM {MetaAgent._meta.db_table} "  # noqa: S608
    f"WHERE {MetaAgent._meta.get_field('client').column} = %s"
)


def _meta_agent_id(client_id: str) -> str | None:
    with prepared_cursor() as cursor:
        cursor.execute(_META_AGENT_ID_SQL, [client_id])
        row = cursor.fetchone()
    return row[0] if row else None


# A turn's own id stored by a concurrent call first: run again, and answer it with that row.
@atomic_run_again(lambda constraint: constraint == MESSAGE_CLIENT_ID_UNIQUE)
def memory_add(
    *,
    tenant: Tenant,
    user_id: str,
    messages: list[MessageInput],
    session_id: str | None,
    session_tag: str | None,
    filter_tags: dict[str, Any],
    occurred_at: datetime | None,
    meta_agent_id: str | None,
    tools: dict[str, str] | None = None,
) -> IngestResult:
    """Everything is validated before this runs; here the turns are stored in one transaction
    and, for chat turns, an extraction job is queued once it commits (the broker being down
    delays extraction, never the add). Raises ``MetaAgent.DoesNotExist`` for a meta agent the
    caller does not own, and the session errors of ``messages_add``."""
    own_meta_agent_id = _meta_agent_id(tenant.client.pk)
    if meta_agent_id is not None and meta_agent_id != own_meta_agent_id:
        raise MetaAgent.DoesNotExist(meta_agent_id)
    end_user, _ = end_user_create_or_get(tenant=tenant, user_id=user_id, name=None)
    added = messages_add(
        tenant=tenant,
        end_user=end_user,
        session_id=session_id,
        tag=session_tag,
        messages=messages,
        filter_tags=filter_tags,
        occurred_at=occurred_at,
        tools=tools,
    )
    if added.extraction_pending:
        extraction_job_ensure(**tenant.owner_ids(end_user))
    return IngestResult(
        session_id=added.session_id,
        messages=added.messages,
        meta_agent_id=own_meta_agent_id,
        # Chat turns wait for extraction (a retry's too: stored the first time, not again).
        extraction_queued=added.tag == Session.Tag.CHAT,
        stored=added.stored,
    )
