"""The memory endpoints (MIRIX shapes): adding turns, reading memories grouped by type,
editing, deleting and clearing them."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.selectors import end_user_get
from memory.api.serializers.memories import (
    SECRETS_DENIED_RESPONSE,
    ComponentsParamsSerializer,
    MemoryAddInputSerializer,
    MemoryAddOutputSerializer,
    MemoryDetailParamsSerializer,
    MemoryReadParamsSerializer,
    MemorySerializer,
    MemoryUpdateSerializer,
    UserScopedInputSerializer,
    images_context,
    memory_update_serializer,
    secrets_context,
)
from memory.procedures import procedural_source_of
from memory.selectors import memory_get, memory_list
from memory.services import memories_clear, memory_add, memory_delete, memory_update
from memory.types import MemoryType, memory_type_names, memory_type_resolve
from mirix_site.api.base import TenantAPIView, UserQuerySerializer
from mirix_site.api.errors import UnprocessableEntity
from mirix_site.api.fields import BooleanField, IntegerField, TextField
from mirix_site.api.history import history_response, history_serializer
from mirix_site.api.schema import error_response
from mirix_site.search.spaces import write_embedders

MEMORY_TYPE_IN_PATH = OpenApiParameter(
    "memory_type", str, OpenApiParameter.PATH, enum=memory_type_names(), description="its type"
)


class MemoryAddApi(TenantAPIView):
    # An add inserts turns, a session, a job; it changes no tracked row (tests/test_history.py).
    history = False

    @extend_schema(
        request=MemoryAddInputSerializer,
        responses={
            202: MemoryAddOutputSerializer,
            404: error_response(
                "meta_agent_id names no meta agent of this client, or an image part an "
                "image_id the organization does not have."
            ),
            409: error_response("The session is closed, or is a session of the other tag."),
        },
        summary="Store conversation turns; chat turns are turned into memories in the background",
    )
    def post(self, request: Request) -> Response:
        serializer = MemoryAddInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        result = memory_add(tenant=self.tenant, **serializer.validated_data)
        body = {
            "success": True,
            "message": "Memory queued for processing"
            if result.extraction_queued
            else "Stored for skill learning",
            "status": "queued" if result.extraction_queued else "stored",
            "agent_id": result.meta_agent_id,
            "message_count": len(result.messages),
            "session_id": result.session_id,
            "message_ids": [str(message.pk) for message in result.messages],
        }
        # Built of the shape's own types (MemoryAddOutputSerializer, the schema's): rendering
        # it through that serializer again cost 0.13 ms a request (bench/RESULTS.md).
        return Response(body, status=status.HTTP_202_ACCEPTED)


class MemoryComponentsApi(TenantAPIView):
    @extend_schema(
        parameters=[UserQuerySerializer, ComponentsParamsSerializer],
        responses={
            200: inline_serializer(
                "MemoryComponents",
                {
                    "success": BooleanField(),
                    "user_id": TextField(),
                    "memory_type": TextField(),
                    "limit": IntegerField(),
                    "memories": serializers.DictField(
                        child=inline_serializer(
                            "MemoryComponentGroup",
                            {"total_count": IntegerField(), "items": MemorySerializer(many=True)},
                        ),
                        help_text="per type (MIRIX's shape): its total and the newest items; "
                        "the vault under knowledge_vault and MIRIX's knowledge alike",
                    ),
                    "counts": serializers.DictField(child=IntegerField()),
                },
            ),
            403: SECRETS_DENIED_RESPONSE,
        },
        summary="The user's memories, grouped by type, newest first",
    )
    def get(self, request: Request) -> Response:
        params = ComponentsParamsSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        end_user = self.query_end_user()
        memories, counts = {}, {}
        secrets = secrets_context(self.tenant, requested=data["include_secrets"])
        for memory_type in data["memory_types"]:
            rows = memory_list(
                tenant=self.tenant,
                memory_type=memory_type,
                end_user=end_user,
                include_superseded=data["include_superseded"],
            )
            counts[memory_type.name] = rows.count()
            page = rows.order_by("-created_at", "-id")
            if data["limit"] > 0:
                page = page[: data["limit"]]
            page = list(page)
            context = {"memory_type": memory_type} | secrets | images_context(page)
            memories[memory_type.name] = {
                "total_count": counts[memory_type.name],
                "items": MemorySerializer(page, many=True, context=context).data,
            }
        if "knowledge_vault" in memories:
            memories["knowledge"] = memories["knowledge_vault"]
        return Response(
            {
                "success": True,
                "user_id": end_user.user_id,
                "memory_type": data["memory_type"],
                "limit": data["limit"],
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
                "success": BooleanField(),
                "message": TextField(),
                "deleted": serializers.DictField(child=IntegerField()),
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
        responses={
            200: inline_serializer(
                "UserMemoriesDeleted",
                {
                    "success": BooleanField(),
                    "deleted": serializers.DictField(child=IntegerField()),
                },
            )
        },
        summary="Delete every memory this client holds about the user (the user stays)",
    )
    def delete(self, request: Request, user_id: str) -> Response:
        end_user = end_user_get(tenant=self.tenant, user_id=user_id)
        deleted = memories_clear(tenant=self.tenant, end_user=end_user)
        return Response({"success": True, "deleted": deleted})


class MemoryDetailApi(TenantAPIView):
    """One memory by type and id. A memory the caller cannot read, or one superseded by another
    (unless ``include_superseded``), answers 404 like a missing one."""

    def _memory(self, type_name: str, memory_id: str) -> tuple[MemoryType, Any]:
        memory_type = memory_type_resolve(type_name)
        if memory_type is None:
            raise NotFound()
        params = MemoryDetailParamsSerializer(data=self.request.query_params)
        params.is_valid(raise_exception=True)
        row = memory_get(
            tenant=self.tenant,
            memory_type=memory_type,
            memory_id=memory_id,
            include_superseded=params.validated_data["include_superseded"],
        )
        # Procedural memories are addressed within one user: ?user_id must name its owner.
        if memory_type.name == "procedural" and row.end_user_id != self.query_end_user().pk:
            raise NotFound()
        return memory_type, row

    @extend_schema(
        parameters=[MEMORY_TYPE_IN_PATH, MemoryReadParamsSerializer],
        responses={200: MemorySerializer, 403: SECRETS_DENIED_RESPONSE},
        summary="Read a memory",
    )
    def get(self, request: Request, memory_type: str, memory_id: str) -> Response:
        found, row = self._memory(memory_type, memory_id)
        params = MemoryReadParamsSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        secrets = secrets_context(self.tenant, requested=params.validated_data["include_secrets"])
        context = {"memory_type": found} | secrets | images_context([row])
        return Response(MemorySerializer(row, context=context).data)

    @extend_schema(
        parameters=[MEMORY_TYPE_IN_PATH, MemoryDetailParamsSerializer],
        request=MemoryUpdateSerializer,
        responses={200: MemorySerializer},
        summary="Edit a memory (its search text and embeddings follow)",
    )
    def patch(self, request: Request, memory_type: str, memory_id: str) -> Response:
        found, row = self._memory(memory_type, memory_id)
        serializer = memory_update_serializer(found)(data=request.data)
        serializer.is_valid(raise_exception=True)
        if not serializer.validated_data:
            raise UnprocessableEntity(
                {
                    "non_field_errors": [
                        f"Nothing to change; editable: {', '.join(found.editable_fields)}."
                    ]
                }
            )
        row = memory_update(
            tenant=self.tenant,
            memory_type=found,
            row=row,
            changes=serializer.validated_data,
            embedders=write_embedders(),
        )
        return Response(MemorySerializer(row, context={"memory_type": found}).data)

    @extend_schema(
        parameters=[MEMORY_TYPE_IN_PATH, MemoryDetailParamsSerializer],
        responses={
            200: inline_serializer(
                "MemoryDeleted",
                {
                    "success": BooleanField(),
                    "id": TextField(),
                    "memory_type": TextField(),
                },
            ),
        },
        summary="Delete a memory",
    )
    def delete(self, request: Request, memory_type: str, memory_id: str) -> Response:
        source = procedural_source_of(memory_id) if memory_type == "procedural" else None
        if source is not None:  # a skill served as a procedure: its app deletes it
            deleted = source.delete(self.tenant, self.query_end_user(), memory_id)
            if not deleted:
                raise NotFound()
            return Response({"success": True, "id": memory_id, "memory_type": "procedural"})
        found, row = self._memory(memory_type, memory_id)
        memory_delete(tenant=self.tenant, memory_type=found, row=row)
        return Response({"success": True, "id": memory_id, "memory_type": found.name})


class MemoryHistoryApi(MemoryDetailApi):
    """A memory's changes: what each changed, before and after, who changed it and when."""

    http_method_names = ["get"]

    @extend_schema(
        parameters=[MEMORY_TYPE_IN_PATH, MemoryDetailParamsSerializer],
        responses={
            200: history_serializer("MemoryHistory", id=TextField(), memory_type=TextField())
        },
        summary="A memory's history: every change, before and after, by whom",
    )
    def get(self, request: Request, memory_type: str, memory_id: str) -> Response:
        found, row = self._memory(memory_type, memory_id)
        return Response(history_response(self.tenant, row, id=str(row.pk), memory_type=found.name))
