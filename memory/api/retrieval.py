"""The retrieval endpoints (MIRIX shapes): search, search across users, retrieval by topic and
by conversation. Each reads its parameters with a serializer, makes one retrieval call and
renders the answer."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import EndUser
from accounts.selectors import end_user_get
from memory.api.serializers.memories import (
    SECRETS_DENIED_RESPONSE,
    MemorySerializer,
    images_context,
    secrets_context,
)
from memory.api.serializers.retrieval import (
    RetrieveConversationInputSerializer,
    RetrievedByConversationSerializer,
    RetrievedByTopicSerializer,
    RetrieveTopicParamsSerializer,
    SearchAllUsersOutputSerializer,
    SearchOutputSerializer,
    SearchParamsSerializer,
    SearchResultSerializer,
    date_range_shape,
    memories_grouped,
)
from memory.selectors import core_blocks_list
from memory.services.retrieval import (
    Retrieved,
    memories_retrieve_by_topic,
    memories_retrieve_for_conversation,
    memories_search,
)
from memory.types import MEMORY_TYPES
from mirix_site.api.base import TenantAPIView, UserQuerySerializer
from mirix_site.search.engine import SearchOutcome, SearchRequest


class RetrievalApiView(TenantAPIView):
    """Answers carry a ``Server-Timing`` header (embed, search, and inside search each lane's
    own time: bm25, vector) so clients and benchmarks can see where a retrieval's time went;
    ``embed;desc="cache"`` when the query's embedding was read from the cache."""

    writes = False  # a read, even over POST (conversation retrieval sends a body)
    outcome: SearchOutcome | None = None

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        response = super().finalize_response(request, response, *args, **kwargs)
        if self.outcome is not None:
            timings = {"embed": self.outcome.embed_ms, "search": self.outcome.search_ms}
            timings |= self.outcome.lane_ms  # bm25, vector: inside search, overlapping
            # An embedding read from the query cache says so: its time is a read, not a model run.
            described = {"embed": 'desc="cache";'} if self.outcome.embed_cached else {}
            response["Server-Timing"] = ", ".join(
                f"{name};{described.get(name, '')}dur={ms:.2f}" for name, ms in timings.items()
            )
        return response

    def memories(self, retrieved: Retrieved) -> dict[str, dict[str, Any]]:
        """The MIRIX ``memories`` of a topic or conversation retrieval (its timings go out in
        the header)."""
        self.outcome = retrieved.outcome
        return memories_grouped(retrieved)


class MemorySearchApi(RetrievalApiView):
    endpoint = "memory/search"

    def search(self, request: Request, *, all_users: bool) -> dict[str, Any]:
        params = SearchParamsSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        end_user = None if all_users else self.query_end_user()
        search = SearchRequest(
            kinds=data["kinds"],
            query=data["query"],
            method=data["search_method"],
            limit=data["limit"],
            filter_tags=data["filter_tags"],
            start=data["start"],
            end=data["end"],
            similarity_threshold=data.get("similarity_threshold"),
            search_field=data["search_field"],
            spoken_range=data["spoken_range"],
            as_of=data.get("as_of"),
        )
        self.outcome = memories_search(
            tenant=self.tenant,
            end_user=end_user,
            endpoint=self.endpoint,
            request=search,
            temporal=data["temporal"],
        )
        context = secrets_context(self.tenant, requested=data["include_secrets"])
        context |= images_context(hit.row for hit in self.outcome.hits)
        results = SearchResultSerializer(self.outcome.hits, many=True, context=context).data
        if data["include_core_memory"]:
            results += self.core_blocks(end_user, data, context)
        return {
            "success": True,
            "query": search.query,
            "memory_type": data["memory_type"],
            "search_field": search.search_field,
            "search_method": search.method,
            "date_range": date_range_shape(search.start, search.end),
            "temporal_expression": data["temporal_expression"],
            "temporal_range": date_range_shape(*(search.spoken_range or (None, None))),
            "results": results,
            "count": len(results),
            "filter_tags": data["filter_tags"],
        }

    def core_blocks(
        self, end_user: EndUser | None, data: dict[str, Any], context: dict[str, Any]
    ) -> list[dict[str, Any]]:
        # MIRIX main's core results (rest_api.py: memory_type core, label, value, and the
        # scope: the client that wrote the block).
        blocks = core_blocks_list(
            tenant=self.tenant,
            end_user=end_user,
            filter_tags=data["block_filter_tags"],
            limit=data["limit"],
        )
        context = context | images_context(blocks) | {"memory_type": MEMORY_TYPES["core"]}
        return [
            MemorySerializer(block, context=context).data | {"scope": block.client_id}
            for block in blocks
        ]

    @extend_schema(
        parameters=[UserQuerySerializer, SearchParamsSerializer],
        responses={200: SearchOutputSerializer, 403: SECRETS_DENIED_RESPONSE},
        summary="Search one user's memories: BM25 and embeddings, fused, then gated by similarity",
    )
    def get(self, request: Request) -> Response:
        return Response(self.search(request, all_users=False))


class MemorySearchAllUsersApi(MemorySearchApi):
    endpoint = "memory/search_all_users"

    @extend_schema(
        parameters=[SearchParamsSerializer],
        responses={200: SearchAllUsersOutputSerializer, 403: SECRETS_DENIED_RESPONSE},
        summary="Search the memories of every user the client may read",
    )
    def get(self, request: Request) -> Response:
        body = self.search(request, all_users=True)
        client_id = self.tenant.client.pk
        body |= {
            "client_id": client_id,
            "organization_id": self.tenant.organization.pk,
            # MIRIX 0.1.7 names the client's scope (a string) and the tags it searched with,
            # the scope added; MIRIX's main names the scopes the client reads. A client here
            # is its own scope and reads the clients its read scopes name.
            "client_scope": client_id,
            "read_scopes": sorted(self.tenant.readable_client_ids),
            "filter_tags": {**body.pop("filter_tags"), "scope": client_id},
        }
        return Response(body)


class RetrieveTopicApi(RetrievalApiView):
    @extend_schema(
        parameters=[RetrieveTopicParamsSerializer],
        responses=RetrievedByTopicSerializer,
        summary="Memories of every type about a topic (core memory whole)",
    )
    def get(self, request: Request) -> Response:
        params = RetrieveTopicParamsSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        retrieved = memories_retrieve_by_topic(
            tenant=self.tenant,
            end_user=end_user_get(tenant=self.tenant, user_id=data["user_id"]),
            topic=data["topic"],
            limit=data["limit"],
            filter_tags=data.get("filter_tags") or {},
        )
        return Response(
            {"success": True, "topic": data["topic"], "memories": self.memories(retrieved)}
        )


class RetrieveConversationApi(RetrievalApiView):
    @extend_schema(
        request=RetrieveConversationInputSerializer,
        responses=RetrievedByConversationSerializer,
        summary="Memories relevant to a conversation's last user turns (topics, dates)",
    )
    def post(self, request: Request) -> Response:
        body = RetrieveConversationInputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        retrieved = memories_retrieve_for_conversation(
            tenant=self.tenant,
            end_user=end_user_get(tenant=self.tenant, user_id=data["user_id"]),
            messages=data["messages"],
            limit=data["limit"],
            filter_tags=data["filter_tags"],
            start=data.get("start_date"),
            end=data.get("end_date"),
            as_of=data["as_of"],
        )
        return Response(
            {
                "success": True,
                # MIRIX's: a comma-separated string, or null when there were none.
                "topics": ", ".join(retrieved.topics) or None,
                "topic_list": retrieved.topics,
                "temporal_expression": retrieved.temporal_expression,
                "date_range": date_range_shape(retrieved.start, retrieved.end),
                "temporal_range": date_range_shape(*(retrieved.spoken_range or (None, None))),
                "memories": self.memories(retrieved),
            }
        )
