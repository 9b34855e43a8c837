"""``POST /memory/auto_dream?user_id``: one of the registered auto-dream modes for the user, or
``all`` (``memory.dreams``), reported per type under ``types`` (the merging modes:
``{total, merged, superseded, unchanged}``); ``dry_run`` reports the same and changes nothing."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from memory.dreams import DreamRequest, dream_modes
from memory.services.dreams import dream_perform
from mirix_site.api.base import TenantAPIView
from mirix_site.api.fields import BooleanField, IntegerField, TextChoiceField, TextField
from mirix_site.api.schema import error_response

MAX_SESSIONS = 1000


class AutoDreamSerializer(serializers.Serializer):
    dry_run = BooleanField(required=False, default=False)
    last_n_sessions = IntegerField(required=False, default=20, min_value=1, max_value=MAX_SESSIONS)
    meta_agent_id = TextField(required=False, allow_null=True, max_length=255)
    model = TextField(required=False, allow_null=True, max_length=255)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The modes the apps registered (at start, before any request or schema is built).
        self.fields["mode"] = TextChoiceField(choices=dream_modes())


class AutoDreamApi(TenantAPIView):
    @extend_schema(
        parameters=[OpenApiParameter("user_id", str, required=True)],
        request=AutoDreamSerializer,
        responses={
            200: inline_serializer(
                "AutoDreamReport",
                {
                    "success": BooleanField(),
                    "types": serializers.DictField(
                        child=serializers.DictField(),
                        help_text="per mode: {total, merged, superseded, unchanged} (procedural: "
                        "the learning run it queues)",
                    ),
                },
            ),
            202: inline_serializer("AutoDreamQueued", {"success": BooleanField()}),
            404: error_response("No such user."),
            409: error_response("A dream of this user is running already."),
        },
        summary="Consolidate a user's memory: merge near-duplicates per type, or (procedural) "
        "learn skills; all: every mode",
    )
    def post(self, request: Request) -> Response:
        end_user = self.query_end_user()
        body = AutoDreamSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data: dict[str, Any] = body.validated_data
        result = dream_perform(tenant=self.tenant, end_user=end_user, request=DreamRequest(**data))
        queued = not data["dry_run"] and result.get("status") == "queued"
        return Response(
            {"success": True, "mode": data["mode"], "dry_run": data["dry_run"], **result},
            status=status.HTTP_202_ACCEPTED if queued else status.HTTP_200_OK,
        )
