from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.api.base import TenantAPIView
from accounts.api.errors import Conflict, UnprocessableEntity
from accounts.models import EndUser
from accounts.selectors import end_user_get
from memory.api.memories import (
    MemoryAddInputSerializer,
    MemoryAddOutputSerializer,
    MemorySerializer,
    UserScopedInputSerializer,
    memory_update_serializer,
)
from memory.api.serializers import (
    AgentStateSerializer,
    MetaAgentInitializeInputSerializer,
    agent_view,
)
from memory.embedding_spaces import write_embedders
from memory.selectors import memory_get, memory_list, meta_agent_get, meta_agent_list
from memory.services import (
    memories_clear,
    memory_add,
    memory_delete,
    memory_update,
    meta_agent_initialize,
)
from memory.services.records import MemoryReadOnlyError
from memory.types import MEMORY_TYPES, MemoryType, memory_type_resolve
from sessions.services import SessionClosedError, SessionTagMismatchError


class MetaAgentInitializeApi(TenantAPIView):
    @extend_schema(
        request=MetaAgentInitializeInputSerializer,
        responses={200: AgentStateSerializer, 201: AgentStateSerializer},
        summary="Create or update the client's meta agent (LLM, embedding, memory components)",
    )
    def post(self, request: Request) -> Response:
        serializer = MetaAgentInitializeInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        meta_agent, created = meta_agent_initialize(tenant=self.tenant, **serializer.validated_data)
        return Response(
            AgentStateSerializer(agent_view(meta_agent)).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class AgentListApi(TenantAPIView):
    @extend_schema(
        responses=AgentStateSerializer(many=True),
        summary="The client's meta agent, as a list (the MIRIX client expects a JSON array)",
    )
    def get(self, request: Request) -> Response:
        agents = [agent_view(meta_agent) for meta_agent in meta_agent_list(tenant=self.tenant)]
        return Response(AgentStateSerializer(agents, many=True).data)


class AgentDetailApi(TenantAPIView):
    @extend_schema(
        responses=AgentStateSerializer, summary="The meta agent or one of its component agents"
    )
    def get(self, request: Request, agent_id: str) -> Response:
        meta_agent, component = meta_agent_get(tenant=self.tenant, agent_id=agent_id)
        return Response(AgentStateSerializer(agent_view(meta_agent, component)).data)


def _end_user_from_query(view: TenantAPIView, *, required: bool = True) -> EndUser | None:
    user_id = view.request.query_params.get("user_id")
    if not user_id:
        if required:
            raise UnprocessableEntity({"user_id": ["This query parameter is required."]})
        return None
    return end_user_get(tenant=view.tenant, user_id=user_id)


class MemoryAddApi(TenantAPIView):
    @extend_schema(
        request=MemoryAddInputSerializer,
        responses={202: MemoryAddOutputSerializer},
        summary="Store conversation turns; chat turns are turned into memories in the background",
    )
    def post(self, request: Request) -> Response:
        serializer = MemoryAddInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            result = memory_add(tenant=self.tenant, **serializer.validated_data)
        except SessionClosedError:
            raise Conflict(
                "This session is closed; start a new session_id.", code="session_closed"
            ) from None
        except SessionTagMismatchError:
            raise Conflict(
                "This session_id names a session of the other tag (chat/task).",
                code="session_tag_mismatch",
            ) from None
        body = {
            "success": True,
            "message": "Memory queued for processing"
            if result.extraction_queued
            else "Stored for skill learning",
            "status": "queued" if result.extraction_queued else "stored",
            "agent_id": result.meta_agent.pk if result.meta_agent else None,
            "message_count": len(result.messages),
            "session_id": result.session_id,
            "message_ids": [str(message.pk) for message in result.messages],
        }
        return Response(MemoryAddOutputSerializer(body).data, status=status.HTTP_202_ACCEPTED)


class MemoryComponentsApi(TenantAPIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("user_id", str, required=True),
            OpenApiParameter(
                "memory_type",
                str,
                description="all, core, episodic, semantic, "
                "procedural, resource, knowledge_vault (or knowledge)",
            ),
            OpenApiParameter("limit", int, description="per type; 0 or less: all"),
            OpenApiParameter("include_secrets", bool, description="show knowledge-vault values"),
        ],
        responses=inline_serializer(
            "MemoryComponents",
            {
                "success": serializers.BooleanField(),
                "user_id": serializers.CharField(),
                "memory_type": serializers.CharField(),
                "limit": serializers.IntegerField(),
                "memories": serializers.DictField(child=MemorySerializer(many=True)),
                "counts": serializers.DictField(child=serializers.IntegerField()),
            },
        ),
        summary="The user's memories, grouped by type, newest first",
    )
    def get(self, request: Request) -> Response:
        end_user = _end_user_from_query(self)
        requested = request.query_params.get("memory_type") or "all"
        if requested == "all":
            kinds = list(MEMORY_TYPES.values())
        else:
            kind = memory_type_resolve(requested)
            if kind is None:
                raise UnprocessableEntity({"memory_type": [f"Unknown memory type {requested!r}."]})
            kinds = [kind]
        try:
            limit = int(request.query_params.get("limit", 50))
        except ValueError:
            raise UnprocessableEntity({"limit": ["An integer."]}) from None
        include_secrets = request.query_params.get("include_secrets") in {"true", "1", "yes"}
        memories, counts = {}, {}
        for kind in kinds:
            rows = memory_list(tenant=self.tenant, kind=kind, end_user=end_user)
            counts[kind.name] = rows.count()
            page = rows.order_by("-created_at", "-id")
            if limit > 0:
                page = page[:limit]
            context = {"kind": kind, "include_secrets": include_secrets}
            memories[kind.name] = MemorySerializer(page, many=True, context=context).data
        return Response(
            {
                "success": True,
                "user_id": end_user.user_id,
                "memory_type": requested,
                "limit": limit,
                "memories": memories,
                "counts": counts,
            }
        )


class MemoryClearApi(TenantAPIView):
    @extend_schema(
        request=UserScopedInputSerializer,
        responses=inline_serializer(
            "MemoryCleared",
            {
                "success": serializers.BooleanField(),
                "message": serializers.CharField(),
                "deleted": serializers.DictField(child=serializers.IntegerField()),
            },
        ),
        summary="Delete every memory this client holds about the user",
    )
    def post(self, request: Request) -> Response:
        serializer = UserScopedInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        end_user = end_user_get(tenant=self.tenant, user_id=serializer.validated_data["user_id"])
        deleted = memories_clear(tenant=self.tenant, end_user=end_user)
        return Response(
            {
                "success": True,
                "message": f"Cleared {sum(deleted.values())} memories.",
                "deleted": deleted,
            }
        )


class UserMemoriesApi(TenantAPIView):
    @extend_schema(
        responses=inline_serializer(
            "UserMemoriesDeleted",
            {
                "success": serializers.BooleanField(),
                "deleted": serializers.DictField(child=serializers.IntegerField()),
            },
        ),
        summary="Delete every memory this client holds about the user (the user stays)",
    )
    def delete(self, request: Request, user_id: str) -> Response:
        end_user = end_user_get(tenant=self.tenant, user_id=user_id)
        deleted = memories_clear(tenant=self.tenant, end_user=end_user)
        return Response({"success": True, "deleted": deleted})


class MemoryDetailApi(TenantAPIView):
    def _kind(self, memory_type: str) -> MemoryType:
        kind = memory_type_resolve(memory_type)
        if kind is None:
            raise NotFound()
        return kind

    def _row(self, kind: MemoryType, memory_id: str) -> Any:
        row = memory_get(tenant=self.tenant, kind=kind, memory_id=memory_id)
        if kind.name == "procedural":
            # Procedural memories are addressed within one user: ?user_id must name its owner.
            end_user = _end_user_from_query(self)
            if row.end_user_id != end_user.pk:
                raise NotFound()
        return row

    @extend_schema(
        request=inline_serializer(
            "MemoryUpdate", {"summary": serializers.CharField(required=False)}
        ),
        responses=MemorySerializer,
        summary="Edit a memory (its search text and embeddings follow)",
    )
    def patch(self, request: Request, memory_type: str, memory_id: str) -> Response:
        kind = self._kind(memory_type)
        row = self._row(kind, memory_id)
        serializer = memory_update_serializer(kind)(data=request.data)
        serializer.is_valid(raise_exception=True)
        if not serializer.validated_data:
            raise UnprocessableEntity(
                {
                    "non_field_errors": [
                        f"Nothing to change; editable: {', '.join(kind.editable_fields)}."
                    ]
                }
            )
        try:
            row = memory_update(
                tenant=self.tenant,
                kind=kind,
                row=row,
                changes=serializer.validated_data,
                embedders=write_embedders(),
            )
        except MemoryReadOnlyError:
            raise PermissionDenied(
                "This memory belongs to another client; it is read-only here."
            ) from None
        return Response(MemorySerializer(row, context={"kind": kind}).data)

    @extend_schema(
        responses=inline_serializer("MemoryDeleted", {"success": serializers.BooleanField()}),
        summary="Delete a memory",
    )
    def delete(self, request: Request, memory_type: str, memory_id: str) -> Response:
        kind = self._kind(memory_type)
        row = self._row(kind, memory_id)
        try:
            memory_delete(tenant=self.tenant, kind=kind, row=row)
        except MemoryReadOnlyError:
            raise PermissionDenied(
                "This memory belongs to another client; it is read-only here."
            ) from None
        return Response({"success": True, "id": memory_id, "memory_type": kind.name})
