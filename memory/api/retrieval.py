"""The retrieval endpoints (MIRIX shapes): search, search across users, retrieval by topic and
by conversation. Request parsing, the one search call, the log row, the response."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.api.base import TenantAPIView
from accounts.api.errors import UnprocessableEntity
from accounts.api.serializers import UserIdField
from accounts.models import EndUser
from accounts.selectors import end_user_get
from memory.api.memories import MemorySerializer, filter_tags_check, messages_check
from memory.embedding_spaces import read_embedder
from memory.models import CoreMemoryBlock
from memory.retrieval.bm25 import Scope
from memory.retrieval.conversation import conversation_query
from memory.retrieval.engine import METHODS, SearchOutcome, SearchRequest, memories_search
from memory.retrieval.log import retrieval_log_write
from memory.selectors import memory_list
from memory.temporal import DateRange, temporal_range
from memory.topics import topics_query
from memory.types import MEMORY_TYPES, SEARCHABLE_TYPES, MemoryType, memory_type_resolve

MAX_LIMIT = 100


def _filter_tags(raw: Any) -> dict[str, Any]:
    """``filter_tags`` of a query string arrive as JSON text."""
    if raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            raise serializers.ValidationError("A JSON object of tag names to values.") from None
    return filter_tags_check(raw)


def _dates_check(attrs: dict[str, Any]) -> None:
    """An explicit date range must not end before it starts (422, naming end_date)."""
    start, end = attrs.get("start_date"), attrs.get("end_date")
    if start and end and start > end:
        raise serializers.ValidationError({"end_date": ["Before start_date."]})


class SearchParamsSerializer(serializers.Serializer):
    query = serializers.CharField(max_length=10_000, trim_whitespace=True)
    memory_type = serializers.CharField(required=False, default="all")
    search_field = serializers.CharField(required=False, allow_null=True, allow_blank=True)
    search_method = serializers.ChoiceField(METHODS, required=False, default="hybrid")
    limit = serializers.IntegerField(required=False, default=10, min_value=1, max_value=MAX_LIMIT)
    filter_tags = serializers.CharField(required=False, allow_blank=True)
    similarity_threshold = serializers.FloatField(
        required=False, allow_null=True, min_value=0.0, max_value=2.0
    )
    start_date = serializers.DateTimeField(required=False, allow_null=True, default_timezone=UTC)
    end_date = serializers.DateTimeField(required=False, allow_null=True, default_timezone=UTC)
    include_secrets = serializers.BooleanField(required=False, default=False)
    temporal = serializers.BooleanField(required=False, default=False)
    as_of = serializers.DateTimeField(required=False, allow_null=True, default_timezone=UTC)

    def validate_filter_tags(self, value: str) -> dict[str, Any]:
        return _filter_tags(value)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        name = attrs.get("memory_type") or "all"
        if name == "all":
            kinds = [MEMORY_TYPES[type_name] for type_name in SEARCHABLE_TYPES]
        else:
            kind = memory_type_resolve(name)
            if kind is None:
                raise serializers.ValidationError(
                    {"memory_type": [f"Unknown memory type {name!r}."]}
                )
            kinds = [kind]
        field = attrs.get("search_field")
        if field in (None, "", "null", "None"):
            field = None
        elif len(kinds) != 1 or field not in kinds[0].text_fields:
            raise serializers.ValidationError(
                {"search_field": ["Name one text field of the one memory type searched."]}
            )
        _dates_check(attrs)
        return attrs | {
            "kinds": kinds,
            "search_field": field,
            "filter_tags": attrs.get("filter_tags") or {},
        }


class SearchResultSerializer(MemorySerializer):
    """A memory plus how it was found: its fused score, each lane's rank, the gate's word."""

    def to_representation(self, instance: Any) -> dict[str, Any]:
        hit = instance
        data = MemorySerializer(
            hit.row, context={**self.context, "kind": hit.kind}
        ).to_representation(hit.row)
        candidate = hit.candidate
        data["score"] = candidate.score
        data["ranks"] = {"bm25": candidate.bm25_rank, "embedding": candidate.vector_rank}
        data["bm25_score"] = candidate.bm25_score
        data["similarity"] = candidate.similarity
        data["gate"] = candidate.gate
        return data


def _as_of(data: dict[str, Any]) -> datetime:
    """The moment a request's time phrases are read from: its ``as_of``, or now."""
    return data.get("as_of") or timezone.now()


def _date_bounds(
    data: dict[str, Any], found: DateRange | None
) -> tuple[datetime | None, datetime | None]:
    """A request's episodic date range: its own start_date and end_date, and for a bound it
    left out, the bound of the time phrase read from it (if any)."""
    return (
        data.get("start_date") or (found.start if found else None),
        data.get("end_date") or (found.end if found else None),
    )


def _date_range(start: datetime | None, end: datetime | None) -> dict[str, str] | None:
    if not start and not end:
        return None
    return {
        "start": start.isoformat() if start else None,
        "end": end.isoformat() if end else None,
    }


class _RetrievalApi(TenantAPIView):
    """Answers carry a ``Server-Timing`` header (embed, search, and inside search each lane's
    own time: bm25, vector) so clients and benchmarks can see where a retrieval's time went."""

    writes = False  # a read, even over POST (conversation retrieval sends a body)
    endpoint = ""
    outcome: SearchOutcome | None = None

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        response = super().finalize_response(request, response, *args, **kwargs)
        if self.outcome is not None:
            timings = {"embed": self.outcome.embed_ms, "search": self.outcome.search_ms}
            timings |= self.outcome.lane_ms  # bm25, vector: inside search, overlapping
            response["Server-Timing"] = ", ".join(
                f"{name};dur={ms:.2f}" for name, ms in timings.items()
            )
        return response

    def scope(self, end_user: EndUser | None) -> Scope:
        return Scope(
            organization_id=self.tenant.organization.pk,
            client_ids=tuple(sorted(self.tenant.readable_client_ids)),
            end_user_id=end_user.pk if end_user is not None else None,
        )

    def run(
        self,
        request: SearchRequest,
        *,
        end_user: EndUser | None,
        extra: dict[str, Any] | None = None,
    ) -> SearchOutcome:
        began = time.perf_counter()
        outcome = memories_search(request, embedder=read_embedder())
        self.outcome = outcome
        retrieval_log_write(
            tenant=self.tenant,
            end_user=end_user,
            endpoint=self.endpoint,
            query=request.query,
            method=request.method,
            memory_types=[kind.name for kind in request.kinds],
            outcome=outcome,
            latency_ms=(time.perf_counter() - began) * 1000,
            extra=extra,
        )
        return outcome

    def end_user_from(self, user_id: str | None) -> EndUser:
        if not user_id:
            raise UnprocessableEntity({"user_id": ["This parameter is required."]})
        return end_user_get(tenant=self.tenant, user_id=user_id)


SEARCH_PARAMETERS = [
    OpenApiParameter("query", str, required=True),
    OpenApiParameter(
        "memory_type",
        str,
        description="all (default), episodic, semantic, procedural, resource, knowledge_vault",
    ),
    OpenApiParameter(
        "search_field", str, description="one text field of the type: narrows the keyword lane"
    ),
    OpenApiParameter("search_method", str, enum=list(METHODS), description="default hybrid"),
    OpenApiParameter("limit", int, description="per memory type, 1-100 (default 10)"),
    OpenApiParameter("filter_tags", str, description="JSON object; memories whose tags contain it"),
    OpenApiParameter(
        "similarity_threshold", float, description="max cosine distance, vector lane only"
    ),
    OpenApiParameter("start_date", str, description="ISO 8601; episodic memories only"),
    OpenApiParameter("end_date", str, description="ISO 8601; episodic memories only"),
    OpenApiParameter("include_secrets", bool, description="show knowledge-vault values"),
    OpenApiParameter(
        "temporal",
        bool,
        description="read a phrase pinning a past time in the query ('a week ago', 'in March') "
        "as the episodic date range; start_date/end_date win",
    ),
    OpenApiParameter(
        "as_of", str, description="ISO 8601; the moment temporal phrases are read from (now)"
    ),
]
SEARCH_RESPONSE = inline_serializer(
    "MemorySearch",
    {
        "success": serializers.BooleanField(),
        "query": serializers.CharField(),
        "memory_type": serializers.CharField(),
        "search_field": serializers.CharField(allow_null=True),
        "search_method": serializers.CharField(),
        "date_range": serializers.DictField(allow_null=True),
        "temporal_expression": serializers.CharField(allow_null=True),
        "results": SearchResultSerializer(many=True),
        "count": serializers.IntegerField(),
    },
)


class MemorySearchApi(_RetrievalApi):
    endpoint = "memory/search"

    def search(self, request: Request, *, all_users: bool) -> dict[str, Any]:
        params = SearchParamsSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        end_user = None if all_users else self.end_user_from(request.query_params.get("user_id"))
        found = (
            temporal_range(data["query"], now=_as_of(data), precise=True)
            if data["temporal"]
            else None
        )
        start, end = _date_bounds(data, found)
        search = SearchRequest(
            scope=self.scope(end_user),
            kinds=data["kinds"],
            query=data["query"],
            method=data["search_method"],
            limit=data["limit"],
            filter_tags=data["filter_tags"],
            start=start,
            end=end,
            similarity_threshold=data.get("similarity_threshold"),
            search_field=data["search_field"],
        )
        outcome = self.run(search, end_user=end_user)
        context = {"include_secrets": data["include_secrets"]}
        results = SearchResultSerializer(outcome.hits, many=True, context=context).data
        return {
            "success": True,
            "query": search.query,
            "memory_type": data["memory_type"],
            "search_field": search.search_field,
            "search_method": search.method,
            "date_range": _date_range(search.start, search.end),
            "temporal_expression": found.expression if found is not None else None,
            "results": results,
            "count": len(results),
        }

    @extend_schema(
        parameters=[OpenApiParameter("user_id", str, required=True), *SEARCH_PARAMETERS],
        responses=SEARCH_RESPONSE,
        summary="Search one user's memories: BM25 and embeddings, fused with RRF, gated",
    )
    def get(self, request: Request) -> Response:
        return Response(self.search(request, all_users=False))


class MemorySearchAllUsersApi(MemorySearchApi):
    endpoint = "memory/search_all_users"

    @extend_schema(
        parameters=SEARCH_PARAMETERS,
        responses=SEARCH_RESPONSE,
        summary="Search the memories of every user the client may read",
    )
    def get(self, request: Request) -> Response:
        body = self.search(request, all_users=True)
        body |= {
            "client_id": self.tenant.client.pk,
            "organization_id": self.tenant.organization.pk,
            "client_scope": sorted(self.tenant.readable_client_ids),
        }
        return Response(body)


def memories_grouped(
    outcome: SearchOutcome, core: list[CoreMemoryBlock], *, include_secrets: bool
) -> dict[str, list[dict[str, Any]]]:
    """The MIRIX ``memories`` shape: every type present, core blocks whole."""
    grouped: dict[str, list[dict[str, Any]]] = {name: [] for name in MEMORY_TYPES}
    context = {"include_secrets": include_secrets}
    for hit in outcome.hits:
        grouped[hit.kind.name].append(SearchResultSerializer(hit, context=context).data)
    core_kind: MemoryType = MEMORY_TYPES["core"]
    grouped["core"] = MemorySerializer(core, many=True, context={"kind": core_kind}).data
    return grouped


class RetrieveTopicParamsSerializer(serializers.Serializer):
    user_id = UserIdField()
    topic = serializers.CharField(max_length=10_000)
    limit = serializers.IntegerField(required=False, default=10, min_value=1, max_value=MAX_LIMIT)
    filter_tags = serializers.CharField(required=False, allow_blank=True)
    use_cache = serializers.BooleanField(required=False)

    def validate_filter_tags(self, value: str) -> dict[str, Any]:
        return _filter_tags(value)


class RetrieveTopicApi(_RetrievalApi):
    endpoint = "memory/retrieve/topic"

    @extend_schema(
        parameters=[
            OpenApiParameter("user_id", str, required=True),
            OpenApiParameter("topic", str, required=True),
            OpenApiParameter("limit", int),
            OpenApiParameter("filter_tags", str),
        ],
        responses=inline_serializer(
            "RetrievedByTopic",
            {
                "success": serializers.BooleanField(),
                "topic": serializers.CharField(),
                "memories": serializers.DictField(child=SearchResultSerializer(many=True)),
            },
        ),
        summary="Memories of every type about a topic (core memory whole)",
    )
    def get(self, request: Request) -> Response:
        params = RetrieveTopicParamsSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        end_user = end_user_get(tenant=self.tenant, user_id=data["user_id"])
        search = SearchRequest(
            scope=self.scope(end_user),
            kinds=[MEMORY_TYPES[name] for name in SEARCHABLE_TYPES],
            query=data["topic"],
            limit=data["limit"],
            filter_tags=data.get("filter_tags") or {},
        )
        outcome = self.run(search, end_user=end_user)
        core = list(memory_list(tenant=self.tenant, kind=MEMORY_TYPES["core"], end_user=end_user))
        return Response(
            {
                "success": True,
                "topic": data["topic"],
                "memories": memories_grouped(outcome, core, include_secrets=False),
            }
        )


class RetrieveConversationInputSerializer(serializers.Serializer):
    user_id = UserIdField()
    messages = serializers.ListField(child=serializers.JSONField(), max_length=1000)
    limit = serializers.IntegerField(required=False, default=10, min_value=1, max_value=MAX_LIMIT)
    filter_tags = serializers.JSONField(required=False, allow_null=True)
    start_date = serializers.DateTimeField(required=False, allow_null=True, default_timezone=UTC)
    end_date = serializers.DateTimeField(required=False, allow_null=True, default_timezone=UTC)
    # The moment time phrases are read from ("yesterday" of which day); now by default.
    as_of = serializers.DateTimeField(required=False, allow_null=True, default_timezone=UTC)
    # Sent by the MIRIX client; accepted and ignored.
    use_cache = serializers.BooleanField(required=False)
    local_model_for_retrieval = serializers.CharField(required=False, allow_null=True)

    def validate_filter_tags(self, value: Any) -> dict[str, Any]:
        return _filter_tags(value)

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
        return attrs | {"messages": messages}


class RetrieveConversationApi(_RetrievalApi):
    endpoint = "memory/retrieve/conversation"

    @extend_schema(
        request=RetrieveConversationInputSerializer,
        responses=inline_serializer(
            "RetrievedByConversation",
            {
                "success": serializers.BooleanField(),
                "topics": serializers.ListField(child=serializers.CharField()),
                "temporal_expression": serializers.CharField(allow_null=True),
                "date_range": serializers.DictField(allow_null=True),
                "memories": serializers.DictField(child=SearchResultSerializer(many=True)),
            },
        ),
        summary="Memories relevant to a conversation's last user turns (topics, dates)",
    )
    def post(self, request: Request) -> Response:
        body = RetrieveConversationInputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        end_user = end_user_get(tenant=self.tenant, user_id=data["user_id"])
        user_texts = [m.text for m in data["messages"] if m.role == "user" and m.text.strip()]
        found = conversation_query(user_texts, now=_as_of(data))
        start, end = _date_bounds(data, found.date_range)
        query = topics_query(found.topics) or " ".join(user_texts[-1:])
        core = list(memory_list(tenant=self.tenant, kind=MEMORY_TYPES["core"], end_user=end_user))
        outcome = SearchOutcome(hits=[], embedding_model=None, gate_thresholds=None)
        if query.strip():
            outcome = self.run(
                SearchRequest(
                    scope=self.scope(end_user),
                    kinds=[MEMORY_TYPES[name] for name in SEARCHABLE_TYPES],
                    query=query,
                    limit=data["limit"],
                    filter_tags=data.get("filter_tags") or {},
                    start=start,
                    end=end,
                ),
                end_user=end_user,
                extra={"topics": found.topics},
            )
        else:
            retrieval_log_write(
                tenant=self.tenant,
                end_user=end_user,
                endpoint=self.endpoint,
                query="",
                method="hybrid",
                memory_types=list(SEARCHABLE_TYPES),
                outcome=outcome,
                latency_ms=0.0,
            )
        return Response(
            {
                "success": True,
                "topics": found.topics,
                "temporal_expression": found.date_range.expression if found.date_range else None,
                "date_range": _date_range(start, end),
                "memories": memories_grouped(outcome, core, include_secrets=False),
            }
        )
