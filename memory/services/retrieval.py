"""Retrieving memories for a topic and for a conversation (MIRIX's two retrieval calls): every
searchable memory type at once through the retrieval engine, and the user's core blocks whole.

Every memory retrieval decides here whether to search at all: a query with no topic words
("what happened recently?", "what did we talk about yesterday?": ``memory.query.recency``)
answers the newest memories instead (``_recent``), within the time its phrase pins, and its log
row says ``method: "recency"`` with the window (``gate.request.recency.range``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.utils import timezone

from accounts.models import EndUser
from accounts.tenancy import Tenant
from images.selectors import image_bytes, images_fetched_from, images_get
from memory.models import CoreMemoryBlock
from memory.procedures import procedures_find
from memory.query.conversation import conversation_query, conversation_reads_images
from memory.query.recency import content_terms
from memory.query.temporal import temporal_range
from memory.query.topics import topics_query
from memory.search import memory_kinds
from memory.selectors import episodes_recent, memory_list, memory_totals
from memory.types import MEMORY_TYPES
from mirix_site.providers.llm import PromptImage
from mirix_site.search.engine import Hit, SearchOutcome, SearchRequest, kind_rows
from mirix_site.search.fusion import Candidate
from mirix_site.search.kinds import SearchableKind
from mirix_site.search.log import retrieval_log_write
from mirix_site.search.services import retrieval_search
from sessions.content import MessageInput
from sessions.selectors import messages_showing


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
    procedures: list[dict[str, Any]] = field(default_factory=list)  # memory.procedures' finds
    # MIRIX's overview beside what was found: each type's total, the latest episodes.
    totals: dict[str, int] = field(default_factory=dict)
    recent_episodes: list[Any] = field(default_factory=list)


def _overviewed(
    retrieved: Retrieved,
    *,
    tenant: Tenant,
    end_user: EndUser,
    limit: int,
    filter_tags: dict[str, Any],
) -> Retrieved:
    return replace(
        retrieved,
        totals=memory_totals(tenant=tenant, end_user=end_user),
        recent_episodes=episodes_recent(
            tenant=tenant,
            end_user=end_user,
            limit=limit,
            filter_tags=filter_tags,
            start=retrieved.start,
            end=retrieved.end,
        ),
    )


def _core_blocks(tenant: Tenant, end_user: EndUser) -> list[CoreMemoryBlock]:
    return list(memory_list(tenant=tenant, memory_type=MEMORY_TYPES["core"], end_user=end_user))


def memories_retrieve_by_topic(
    *, tenant: Tenant, end_user: EndUser, topic: str, limit: int, filter_tags: dict[str, Any]
) -> Retrieved:
    """The memories of every type about a topic (``limit`` of each), and the core blocks; a
    topic without topic words ("recent news", "yesterday"): the newest of every type, within
    the time it pins (``_recent``)."""
    pinned = temporal_range(topic, now=timezone.now(), precise=True)
    outcome = _memories_find(
        tenant=tenant,
        end_user=end_user,
        endpoint="memory/retrieve/topic",
        request=SearchRequest(
            kinds=memory_kinds(), query=topic, limit=limit, filter_tags=filter_tags
        ),
        pinned=(pinned.start, pinned.end) if pinned is not None else None,
    )
    return _overviewed(
        Retrieved(
            outcome=outcome,
            core=_core_blocks(tenant, end_user),
            topics=[topic],
            procedures=procedures_find(tenant=tenant, end_user=end_user, query=topic, limit=limit),
        ),
        tenant=tenant,
        end_user=end_user,
        limit=limit,
        filter_tags=filter_tags,
    )


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
    """The memories relevant to a conversation's last user turns: their topics (and, for a
    model that reads them, their images') become the query (else the last turn itself), a
    time phrase in them, read as of ``as_of``, the time that memories dated in rank higher;
    ``start`` and ``end`` filter. Images with no words and no such model:
    ``_retrieve_for_images``."""
    user_texts = [m.text for m in messages if m.role == "user" and m.text.strip()]
    images = _prompt_images(tenant, messages) if conversation_reads_images() else []
    found = conversation_query(user_texts, now=as_of, images=images)
    shows_images = any(message.image_ids or message.image_urls for message in messages)
    if not user_texts and not found.topics and shows_images:
        return _retrieve_for_images(
            tenant=tenant,
            end_user=end_user,
            messages=messages,
            limit=limit,
            filter_tags=filter_tags,
        )
    spoken = (found.date_range.start, found.date_range.end) if found.date_range else None
    query = topics_query(found.topics) or " ".join(user_texts[-1:])
    request = SearchRequest(
        kinds=memory_kinds(),
        query=query,
        limit=limit,
        filter_tags=filter_tags,
        start=start,
        end=end,
        spoken_range=spoken,
    )
    pinned = found.pinned_range
    # Judged on the query the turns made (their topics, else the last turn): a last turn
    # without topic words after turns with some ("and yesterday?") still searches those.
    outcome = _memories_find(
        tenant=tenant,
        end_user=end_user,
        endpoint="memory/retrieve/conversation",
        request=request,
        pinned=(pinned.start, pinned.end) if pinned is not None else None,
        extra={"topics": found.topics} if query.strip() else None,
    )
    return _overviewed(
        Retrieved(
            outcome=outcome,
            core=_core_blocks(tenant, end_user),
            topics=found.topics,
            temporal_expression=found.date_range.expression if found.date_range else None,
            start=start,
            end=end,
            spoken_range=spoken,
            # Skills are for what the user asks now: its last turn is the task.
            procedures=procedures_find(
                tenant=tenant, end_user=end_user, query=" ".join(user_texts[-1:]), limit=limit
            ),
        ),
        tenant=tenant,
        end_user=end_user,
        limit=limit,
        filter_tags=filter_tags,
    )


def _prompt_images(tenant: Tenant, messages: list[MessageInput]) -> list[PromptImage]:
    """The images of the user's turns, in order, for a model that reads them: inline ones as
    sent, named ones and remote ones fetched before from the store (others are not fetched
    inside a request)."""
    users = [message for message in messages if message.role == "user"]
    named = [sha for message in users for sha in message.image_ids]
    fetched = images_fetched_from(
        tenant=tenant, urls=[url for message in users for url in message.image_urls]
    )
    stored = images_get(tenant=tenant, sha256s=[*named, *fetched])
    shown: list[PromptImage] = []
    for sha in dict.fromkeys([*named, *fetched]):
        inline = next((m.inline_images[sha] for m in users if sha in m.inline_images), None)
        if inline is not None:
            shown.append(PromptImage(mime=inline.mime, data=inline.data))
        elif sha in stored:
            shown.append(PromptImage(mime=stored[sha].mime, data=image_bytes(image=stored[sha])))
    return shown


def _retrieve_for_images(
    *,
    tenant: Tenant,
    end_user: EndUser,
    messages: list[MessageInput],
    limit: int,
    filter_tags: dict[str, Any],
) -> Retrieved:
    """A conversation of images without words, and no model here that read them: of each type
    the memories drawn from turns that showed the same images (newest first), then the most
    recent episodic memories, ``limit`` of each. An image is known by its hash (inline and
    named ones) or by the URL it was fetched from before."""
    began = time.perf_counter()
    image_ids = {sha for message in messages for sha in message.image_ids}
    image_ids.update(
        images_fetched_from(
            tenant=tenant, urls=[url for message in messages for url in message.image_urls]
        )
    )
    shown_in = messages_showing(tenant=tenant, end_user=end_user, image_ids=image_ids)
    hits: list[Hit] = []
    for kind in memory_kinds():
        rows = memory_list(tenant=tenant, memory_type=MEMORY_TYPES[kind.name], end_user=end_user)
        if filter_tags:
            rows = rows.filter(kind.tags_filter(filter_tags))
        linked = (
            list(rows.filter(source_message_ids__overlap=shown_in).order_by("-created_at")[:limit])
            if shown_in
            else []
        )
        hits += [_listed(kind, row, "image") for row in linked]
        if kind.name == "episodic" and len(linked) < limit:
            recent = rows.exclude(pk__in=[row.pk for row in linked]).order_by("-occurred_at")
            hits += [_listed(kind, row, "recent") for row in recent[: limit - len(linked)]]
    outcome = SearchOutcome(hits=hits, embedding_model=None)
    retrieval_log_write(
        tenant=tenant,
        end_user=end_user,
        endpoint="memory/retrieve/conversation",
        query="",
        method="images",
        kinds=[kind.name for kind in memory_kinds()],
        outcome=outcome,
        latency_ms=(time.perf_counter() - began) * 1000,
        extra={"image_ids": sorted(image_ids)},
    )
    return _overviewed(
        Retrieved(outcome=outcome, core=_core_blocks(tenant, end_user), topics=[]),
        tenant=tenant,
        end_user=end_user,
        limit=limit,
        filter_tags=filter_tags,
    )


def _listed(kind: SearchableKind, row: Any, why: str) -> Hit:
    """A memory found by listing, not searching: no lane ranked it; ``gate`` says why."""
    return Hit(kind=kind, row=row, candidate=Candidate(document_id=row.pk, gate=why))


def memories_search(
    *,
    tenant: Tenant,
    end_user: EndUser | None,
    endpoint: str,
    request: SearchRequest,
    temporal: bool = True,
) -> SearchOutcome:
    """``/memory/search`` and ``/memory/search_all_users``: the engine's search; for a blank
    query the newest memories of each kind asked, as MIRIX lists them for ``query=""``
    (``rest_api.search_memory``); for a query without topic words the newest too, within the
    time its phrase pins (``request.spoken_range``, read precisely by the serializer).
    ``temporal=False``: time phrases are only words (they count as topic words)."""
    if not request.query.strip():
        return _recent(
            tenant=tenant,
            end_user=end_user,
            endpoint=endpoint,
            request=request,
            within=None,
            method="list",
            why="listed: no query, newest first",
        )
    return _memories_find(
        tenant=tenant,
        end_user=end_user,
        endpoint=endpoint,
        request=request,
        pinned=request.spoken_range,
        temporal=temporal,
    )


def _memories_find(
    *,
    tenant: Tenant,
    end_user: EndUser | None,
    endpoint: str,
    request: SearchRequest,
    pinned: tuple[datetime, datetime] | None,
    temporal: bool = True,
    extra: dict[str, Any] | None = None,
) -> SearchOutcome:
    """The decision every memory retrieval makes: search the query's topic words, or, when
    it has none (``memory.query.recency``), list the newest memories within ``pinned``, the
    time its phrase pins (None: any time)."""
    if content_terms(request.query, temporal=temporal):
        return retrieval_search(
            tenant=tenant, end_user=end_user, endpoint=endpoint, request=request, extra=extra
        )
    return _recent(
        tenant=tenant,
        end_user=end_user,
        endpoint=endpoint,
        request=request,
        within=pinned,
        extra=extra,
    )


def _recent(
    *,
    tenant: Tenant,
    end_user: EndUser | None,
    endpoint: str,
    request: SearchRequest,
    within: tuple[datetime, datetime] | None,
    method: str = "recency",
    why: str = "recent",
    extra: dict[str, Any] | None = None,
) -> SearchOutcome:
    """The answer to a query with no topic words: the newest memories of each kind asked
    (``limit`` of each), newest first by each kind's own time (its ``time_field``: when an
    episode happened; else when the memory was stored), within the tags, the explicit dates
    (kinds with a time field, as a search filters them) and ``within``, the time a phrase
    pins ("yesterday"), for every kind. A time that holds nothing answers nothing: the caller
    asked about that time, and the retrieval endpoints' ``episodic.recent`` still shows the
    latest episodes. Logged with ``method`` and, but for a blank query's listing, the
    request's ``recency`` (its window, or None)."""
    began = time.perf_counter()
    dated: list[tuple[datetime, Hit]] = []
    for kind in request.kinds:
        if request.filter_tags and kind.tags_field is None:
            continue  # as a search does: a kind with no tags has none of those asked
        searched = kind_rows(kind, request)
        rows = kind.model.objects.readable_by(tenant, end_user=end_user).filter(
            kind.current if searched is None else searched
        )
        if request.filter_tags:
            rows = rows.filter(kind.tags_filter(request.filter_tags))
        if kind.time_field and request.start is not None:
            rows = rows.filter(**{f"{kind.time_field}__gte": request.start})
        if kind.time_field and request.end is not None:
            rows = rows.filter(**{f"{kind.time_field}__lte": request.end})
        when = kind.time_field or "created_at"
        if within is not None:
            rows = rows.filter(**{f"{when}__range": within})
        newest = rows.select_related("end_user").order_by(f"-{when}", "-id")[: request.limit]
        dated += [(getattr(row, when), _listed(kind, row, why)) for row in newest]
    dated.sort(key=lambda item: item[0], reverse=True)
    outcome = SearchOutcome(hits=[hit for _, hit in dated], embedding_model=None)
    if method == "recency":
        window = [moment.isoformat() for moment in within] if within is not None else None
        extra = {**(extra or {}), "recency": {"range": window}}
    retrieval_log_write(
        tenant=tenant,
        end_user=end_user,
        endpoint=endpoint,
        query=request.query,
        method=method,
        kinds=[kind.name for kind in request.kinds],
        outcome=outcome,
        latency_ms=(time.perf_counter() - began) * 1000,
        extra=extra,
    )
    return outcome
