"""Retrieving memories for a topic and for a conversation (MIRIX's two retrieval calls): every
searchable memory type at once through the retrieval engine, and the user's core blocks whole."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from accounts.models import EndUser
from accounts.tenancy import Tenant
from memory.models import CoreMemoryBlock
from memory.query.conversation import conversation_query
from memory.query.topics import topics_query
from memory.retrieval.engine import SearchOutcome, SearchRequest
from memory.retrieval.service import retrieval_search
from memory.selectors import memory_list
from memory.types import MEMORY_TYPES, memory_kinds
from sessions.content import MessageInput


@dataclass(frozen=True)
class Retrieved:
    """What a topic or a conversation retrieved, and what was read from the conversation."""

    outcome: SearchOutcome
    core: list[CoreMemoryBlock]
    topics: list[str]
    temporal_expression: str | None = None
    start: datetime | None = None  # the explicit date range: a filter
    end: datetime | None = None
    spoken_range: tuple[datetime, datetime] | None = None  # the time phrase's: a preference


def _core_blocks(tenant: Tenant, end_user: EndUser) -> list[CoreMemoryBlock]:
    return list(memory_list(tenant=tenant, memory_type=MEMORY_TYPES["core"], end_user=end_user))


def memories_retrieve_by_topic(
    *, tenant: Tenant, end_user: EndUser, topic: str, limit: int, filter_tags: dict[str, Any]
) -> Retrieved:
    """The memories of every type about a topic (``limit`` of each), and the core blocks."""
    outcome = retrieval_search(
        tenant=tenant,
        end_user=end_user,
        endpoint="memory/retrieve/topic",
        request=SearchRequest(
            kinds=memory_kinds(), query=topic, limit=limit, filter_tags=filter_tags
        ),
    )
    return Retrieved(outcome=outcome, core=_core_blocks(tenant, end_user), topics=[topic])


def memories_retrieve_for_conversation(
    *,
    tenant: Tenant,
    end_user: EndUser,
    messages: list[MessageInput],
    limit: int,
    filter_tags: dict[str, Any],
    start: datetime | None,
    end: datetime | None,
    as_of: datetime,
) -> Retrieved:
    """The memories relevant to a conversation's last user turns: their topics become the
    query (else the last turn itself), a time phrase in them, read as of ``as_of``, the time
    that memories dated in rank higher; ``start`` and ``end`` filter."""
    user_texts = [m.text for m in messages if m.role == "user" and m.text.strip()]
    found = conversation_query(user_texts, now=as_of)
    spoken = (found.date_range.start, found.date_range.end) if found.date_range else None
    query = topics_query(found.topics) or " ".join(user_texts[-1:])
    outcome = retrieval_search(
        tenant=tenant,
        end_user=end_user,
        endpoint="memory/retrieve/conversation",
        request=SearchRequest(
            kinds=memory_kinds(),
            query=query,
            limit=limit,
            filter_tags=filter_tags,
            start=start,
            end=end,
            spoken_range=spoken,
        ),
        extra={"topics": found.topics} if query.strip() else None,
    )
    return Retrieved(
        outcome=outcome,
        core=_core_blocks(tenant, end_user),
        topics=found.topics,
        temporal_expression=found.date_range.expression if found.date_range else None,
        start=start,
        end=end,
        spoken_range=spoken,
    )
