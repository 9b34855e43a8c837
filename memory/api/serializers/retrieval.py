"""Request and response shapes of the retrieval endpoints (MIRIX shapes): search, search across
users, retrieval by topic and by conversation. Parameters are read here, time phrases
included; the views only call the retrieval services."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.utils import timezone
from rest_framework import serializers

from memory.api.serializers.memories import (
    FilterTagsField,
    MemorySerializer,
    filter_tags_check,
    filter_tags_query_field,
    images_context,
    include_secrets_field,
    messages_check,
)
from memory.query.temporal import temporal_range
from memory.search import memory_kinds
from memory.services.retrieval import Retrieved
from memory.types import MEMORY_TYPES, memory_type_names, memory_type_resolve
from mirix_site.api.fields import (
    BooleanField,
    FloatField,
    IntegerField,
    TextChoiceField,
    TextField,
    UserIdField,
)
from mirix_site.search.engine import METHODS
from sessions.api.serializers import MessageInputField

MAX_LIMIT = 100
# The search_field values that name no field (MIRIX clients send "null").
NO_SEARCH_FIELD = ("null", "None", "")


def _dates_check(attrs: dict[str, Any]) -> None:
    """An explicit date range must not end before it starts (422, naming end_date)."""
    start, end = attrs.get("start_date"), attrs.get("end_date")
    if start and end and start > end:
        raise serializers.ValidationError({"end_date": ["Before start_date."]})


def as_of(data: dict[str, Any]) -> datetime:
    """The moment a request's time phrases are read from: its ``as_of``, or now."""
    return data.get("as_of") or timezone.now()


def date_range_shape(start: datetime | None, end: datetime | None) -> dict[str, str] | None:
    if not start and not end:
        return None
    return {
        "start": start.isoformat() if start else None,
        "end": end.isoformat() if end else None,
    }


class SearchParamsSerializer(serializers.Serializer):
    """``GET /memory/search``'s parameters. Validated, they add ``kinds`` (the searchable kinds
    of the memory types asked for), ``start``/``end`` (the explicit dates: a filter),
    ``spoken_range`` (with ``temporal``, the range of a time phrase in the query: a preference)
    and ``temporal_expression``."""

    query = TextField(
        max_length=10_000,
        trim_whitespace=True,
        required=False,
        allow_blank=True,
        default="",
        help_text="what to search for; empty (MIRIX's default): the newest memories of each "
        "type asked, limit of each; without topic words ('what happened recently?', 'what did "
        "we talk about yesterday?'): the newest too, within the time a phrase pins",
    )
    memory_type = TextChoiceField(
        ["all", *memory_type_names(searchable=True)], required=False, default="all"
    )
    search_field = TextChoiceField(
        [*NO_SEARCH_FIELD, *sorted({name for kind in memory_kinds() for name in kind.text_fields})],
        required=False,
        allow_null=True,
        allow_blank=True,
        help_text="narrows the keyword lane to one text field of the one memory_type searched ("
        + "; ".join(f"{kind.name}: {', '.join(kind.text_fields)}" for kind in memory_kinds())
        + "); null (the MIRIX client's default) for every field",
    )
    search_method = TextChoiceField(
        METHODS, required=False, default="hybrid", help_text="default hybrid"
    )
    limit = IntegerField(
        required=False,
        default=10,
        min_value=1,
        max_value=MAX_LIMIT,
        help_text="per memory type, 1-100 (default 10)",
    )
    filter_tags = filter_tags_query_field(help_text="memories whose tags contain these")
    similarity_threshold = FloatField(
        required=False,
        allow_null=True,
        min_value=0.0,
        max_value=2.0,
        help_text="max cosine distance, vector lane only",
    )
    start_date = serializers.DateTimeField(
        required=False,
        allow_null=True,
        default_timezone=UTC,
        help_text="ISO 8601; episodic memories only",
    )
    end_date = serializers.DateTimeField(
        required=False,
        allow_null=True,
        default_timezone=UTC,
        help_text="ISO 8601, not before start_date; episodic memories only",
    )
    include_secrets = include_secrets_field()
    include_core_memory = BooleanField(
        required=False,
        default=False,
        help_text="also answer the core blocks (memory_type core, whole, not searched; limit "
        "of them), as MIRIX's newer client asks",
    )
    block_filter_tags = filter_tags_query_field(
        help_text="with include_core_memory: the blocks whose tags contain these"
    )
    temporal = BooleanField(
        required=False,
        default=True,
        help_text="read a phrase pinning a past time in the query ('a week ago', 'in March', "
        "'on 1 February, 2023'): memories dated in it rank higher (temporal_range), none is "
        "left out for it; false: the phrase is only words",
    )
    as_of = serializers.DateTimeField(
        required=False,
        allow_null=True,
        default_timezone=UTC,
        help_text="ISO 8601; the moment searched as of (default now): time phrases are read "
        "from it ('last week' of which week), and semantic facts are those that held then (said "
        "at or before it and not yet replaced: a fact a later one superseded is found as of its "
        "time); without it, current facts only",
    )

    def validate_filter_tags(self, value: Any) -> dict[str, Any]:
        return filter_tags_check(value)

    def validate_block_filter_tags(self, value: Any) -> dict[str, Any]:
        return filter_tags_check(value)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        name = attrs["memory_type"]
        kinds = memory_kinds() if name == "all" else (memory_type_resolve(name).kind,)
        field = attrs.get("search_field")
        if field is None or field in NO_SEARCH_FIELD:
            field = None
        elif len(kinds) != 1 or field not in kinds[0].text_fields:
            raise serializers.ValidationError(
                {"search_field": ["Name one text field of the one memory type searched."]}
            )
        _dates_check(attrs)
        found = (
            temporal_range(attrs["query"], now=as_of(attrs), precise=True)
            if attrs["temporal"]
            else None
        )
        return attrs | {
            "kinds": kinds,
            "search_field": field,
            "filter_tags": attrs.get("filter_tags") or {},
            "block_filter_tags": attrs.get("block_filter_tags") or {},
            "start": attrs.get("start_date"),
            "end": attrs.get("end_date"),
            "spoken_range": (found.start, found.end) if found is not None else None,
            "temporal_expression": found.expression if found is not None else None,
        }


class SearchResultSerializer(MemorySerializer):
    """A memory plus how it was found: its fused score, each lane's rank, the gate's word."""

    def to_representation(self, instance: Any) -> dict[str, Any]:
        hit = instance
        data = MemorySerializer(
            hit.row, context={**self.context, "memory_type": MEMORY_TYPES[hit.kind.name]}
        ).to_representation(hit.row)
        candidate = hit.candidate
        data["score"] = candidate.score
        data["ranks"] = {
            "bm25": candidate.bm25_rank,
            "embedding": candidate.vector_rank,
            "time": candidate.time_rank,
        }
        data["bm25_score"] = candidate.bm25_score
        data["similarity"] = candidate.similarity
        data["gate"] = candidate.gate
        return data


class SearchOutputSerializer(serializers.Serializer):
    success = BooleanField()
    query = TextField(
        allow_blank=True,
        help_text="as asked; empty or without topic words: the newest were listed (gate "
        "'recent' on each result)",
    )
    memory_type = TextField()
    search_field = TextField(allow_null=True)
    search_method = TextField()
    date_range = serializers.DictField(allow_null=True, help_text="start_date/end_date: a filter")
    temporal_expression = TextField(allow_null=True)
    temporal_range = serializers.DictField(
        allow_null=True, help_text="the time temporal_expression names: favoured, not a filter"
    )
    results = SearchResultSerializer(many=True)
    count = IntegerField()
    filter_tags = serializers.DictField(help_text="the tags searched within")


class SearchAllUsersOutputSerializer(SearchOutputSerializer):
    """MIRIX's answer of ``/memory/search_all_users``: 0.1.7's (``client_scope``, and the
    ``scope`` it adds to ``filter_tags``) and ``main``'s (``read_scopes``) alike."""

    client_id = TextField()
    organization_id = TextField()
    client_scope = TextField(help_text="the client's own scope: its id")
    read_scopes = serializers.ListField(
        child=TextField(), help_text="the clients whose memories were searched, this one too"
    )
    filter_tags = serializers.DictField(help_text="the tags searched within, and scope")


def _episode(data: dict[str, Any]) -> dict[str, Any]:
    # MIRIX names an episode's time ``timestamp``; ours is ``occurred_at``: both.
    return data | {"timestamp": data.get("occurred_at")}


def memories_grouped(retrieved: Retrieved) -> dict[str, dict[str, Any]]:
    """MIRIX's ``memories`` (``rest_api.retrieve_memories_by_keywords``): per type its
    ``total_count`` and ``items``; episodic its latest (``recent``) and the ones found
    (``relevant``); the vault under MIRIX's ``knowledge`` and our ``knowledge_vault`` alike;
    core blocks whole; secrets masked; what the procedural sources found (active skills)
    after the extracted procedures."""
    outcome, core = retrieved.outcome, retrieved.core
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in MEMORY_TYPES}
    rows = [*(hit.row for hit in outcome.hits), *core, *retrieved.recent_episodes]
    context = {"secrets_of": None} | images_context(rows)
    for hit in outcome.hits:
        found[hit.kind.name].append(SearchResultSerializer(hit, context=context).data)
    found["procedural"] += retrieved.procedures
    recent = MemorySerializer(
        retrieved.recent_episodes,
        many=True,
        context=context | {"memory_type": MEMORY_TYPES["episodic"]},
    ).data
    core_items = MemorySerializer(
        core, many=True, context=context | {"memory_type": MEMORY_TYPES["core"]}
    ).data

    def group(name: str, items: list[dict[str, Any]]) -> dict[str, Any]:
        return {"total_count": max(retrieved.totals.get(name, 0), len(items)), "items": items}

    vault = group("knowledge_vault", found["knowledge_vault"])
    return {
        "episodic": {
            "total_count": max(retrieved.totals.get("episodic", 0), len(recent)),
            "recent": [_episode(item) for item in recent],
            "relevant": [_episode(item) for item in found["episodic"]],
        },
        "semantic": group("semantic", found["semantic"]),
        "procedural": group("procedural", found["procedural"]),
        "resource": group("resource", found["resource"]),
        "knowledge_vault": vault,
        "knowledge": vault,
        "core": {"total_count": len(core_items), "items": core_items},
    }


class _MemoryGroupSerializer(serializers.Serializer):
    total_count = IntegerField()
    items = SearchResultSerializer(many=True)


class _EpisodesSerializer(serializers.Serializer):
    total_count = IntegerField()
    recent = MemorySerializer(many=True, help_text="the latest episodes, whatever the query")
    relevant = SearchResultSerializer(many=True, help_text="the episodes found")


class _MemoriesSerializer(serializers.Serializer):
    """MIRIX's ``memories`` of a retrieval."""

    episodic = _EpisodesSerializer()
    semantic = _MemoryGroupSerializer()
    procedural = _MemoryGroupSerializer()
    resource = _MemoryGroupSerializer()
    knowledge_vault = _MemoryGroupSerializer()
    knowledge = _MemoryGroupSerializer(help_text="MIRIX's name of knowledge_vault: the same")
    core = _MemoryGroupSerializer()


class RetrieveTopicParamsSerializer(serializers.Serializer):
    user_id = UserIdField()
    topic = TextField(max_length=10_000)
    limit = IntegerField(required=False, default=10, min_value=1, max_value=MAX_LIMIT)
    filter_tags = filter_tags_query_field()
    use_cache = BooleanField(required=False)

    def validate_filter_tags(self, value: Any) -> dict[str, Any]:
        return filter_tags_check(value)

    def validate_block_filter_tags(self, value: Any) -> dict[str, Any]:
        return filter_tags_check(value)


class RetrievedByTopicSerializer(serializers.Serializer):
    success = BooleanField()
    topic = TextField()
    memories = _MemoriesSerializer()


class RetrieveConversationInputSerializer(serializers.Serializer):
    """A conversation to retrieve for: some message holds text or an image; start_date is not
    after end_date."""

    user_id = UserIdField()
    messages = serializers.ListField(child=MessageInputField(), min_length=1, max_length=1000)
    limit = IntegerField(required=False, default=10, min_value=1, max_value=MAX_LIMIT)
    filter_tags = FilterTagsField()
    start_date = serializers.DateTimeField(required=False, allow_null=True, default_timezone=UTC)
    end_date = serializers.DateTimeField(required=False, allow_null=True, default_timezone=UTC)
    # The moment time phrases are read from ("yesterday" of which day); now by default.
    as_of = serializers.DateTimeField(required=False, allow_null=True, default_timezone=UTC)
    # Sent by the MIRIX client; accepted and ignored.
    use_cache = BooleanField(required=False)
    local_model_for_retrieval = TextField(required=False, allow_null=True)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        messages = messages_check(attrs["messages"])
        if not any(
            message.text.strip()
            or message.image_urls
            or any(part["type"] == "image" for part in message.parts)
            for message in messages
        ):
            raise serializers.ValidationError(
                {"messages": ["The messages hold no text and no image: nothing to retrieve for."]}
            )
        _dates_check(attrs)
        return attrs | {
            "messages": messages,
            "filter_tags": attrs.get("filter_tags") or {},
            "as_of": as_of(attrs),
        }


class RetrievedByConversationSerializer(serializers.Serializer):
    success = BooleanField()
    topics = TextField(
        allow_null=True,
        help_text="the topics read from the conversation, comma-separated, or null (MIRIX)",
    )
    topic_list = serializers.ListField(child=TextField(), help_text="the same, one by one")
    temporal_expression = TextField(allow_null=True)
    date_range = serializers.DictField(allow_null=True, help_text="start_date/end_date: a filter")
    temporal_range = serializers.DictField(
        allow_null=True, help_text="the time temporal_expression names: favoured, not a filter"
    )
    memories = _MemoriesSerializer()
