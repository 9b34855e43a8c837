"""``POST /memory/import``: turns in bulk, as NDJSON streamed line by line or as one JSON body."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import UnsupportedMediaType
from rest_framework.request import Request
from rest_framework.response import Response

from memory.api.serializers.imports import (
    ImportJsonSerializer,
    ImportLine,
    ImportOutputSerializer,
    ImportParamsSerializer,
    NdjsonLines,
    import_record_read,
)
from memory.services.imports import memory_import_lines, memory_import_start
from mirix_site.api.base import TenantAPIView

NDJSON_TYPES = ("application/x-ndjson", "application/ndjson", "application/jsonl")
# Refused lines an answer lists (all are counted).
REFUSALS_LISTED = 100

DESCRIPTION = f"""Turns in bulk, for a migration from another memory system or a backfill.

Send NDJSON (`Content-Type: application/x-ndjson`, streamed: one line at a time is read) or this
JSON body with the lines in a list. Each line is one turn: `role`, `content`, `client_message_id`
(required), and optionally `user_id` (else the request's), `session_id`, `session_tag`,
`filter_tags`, `occurred_at`, `name`, `tool_calls`, `tool_call_id`, as `/memory/add` takes them.
Consecutive turns of one session are stored together; chat turns are extracted into memories by
the workers, as after `/memory/add`. A line naming a `memory_type` is a ready memory: its type's
fields (as `/memory/{{type}}/{{id}}` shows them), `user_id`, `occurred_at`, `filter_tags` and
optionally `client_memory_id`; it is indexed and embedded before the answer.

A turn whose `client_message_id` the client stored before (an earlier request, a retry, the
file sent again after a cut) is found, not stored again, as is a memory stored before (the same
`client_memory_id`, or without one the same type and fields): an import is resumed by sending it
again under the same `import_id`. A line that cannot be stored is refused with its number and
reason, and the others are imported. At most {settings.IMPORT_MAX_LINES:,} lines are read per
request (`more` says lines were left: send them in another request naming the import).
Progress (lines read, stored, found, refused, ETA) is on the import's row, in the answer and in
the admin."""


class MemoryImportApi(TenantAPIView):
    @extend_schema(
        parameters=[ImportParamsSerializer],
        request=ImportJsonSerializer,
        responses={200: ImportOutputSerializer},
        summary="Import turns in bulk, idempotently (each carries its client_message_id)",
        description=DESCRIPTION,
    )
    def post(self, request: Request) -> Response:
        params = ImportParamsSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        import_id = params.validated_data.get("import_id") or f"import-{uuid.uuid4()}"
        default_user_id = params.validated_data.get("user_id")
        media_type = request.content_type.split(";")[0].strip().lower()
        lines: Iterable[ImportLine]
        if media_type in NDJSON_TYPES:
            lines = NdjsonLines(
                request, default_user_id=default_user_id, max_lines=settings.IMPORT_MAX_LINES
            )
        elif media_type == "application/json":
            lines = self._json_lines(request, default_user_id)
        else:
            raise UnsupportedMediaType(request.content_type)
        job = memory_import_start(
            tenant=self.tenant,
            import_id=import_id,
            expected_lines=params.validated_data.get("expected_lines"),
        )
        part = memory_import_lines(tenant=self.tenant, job=job, lines=lines)
        body: dict[str, Any] = {
            "success": True,
            "import_id": import_id,
            "lines_read": part.lines_read,
            "turns_stored": part.turns_stored,
            "turns_found": part.turns_found,
            "memories_stored": part.memories_stored,
            "memories_found": part.memories_found,
            "lines_refused": len(part.refused),
            "refused": [refusal.as_dict() for refusal in part.refused[:REFUSALS_LISTED]],
            "more": isinstance(lines, NdjsonLines) and lines.more,
            "job": part.job,
        }
        return Response(ImportOutputSerializer(body).data, status=status.HTTP_200_OK)

    def _json_lines(self, request: Request, default_user_id: str | None) -> Iterator[ImportLine]:
        body = ImportJsonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return (
            import_record_read(record, line=number, default_user_id=default_user_id)
            for number, record in enumerate(body.validated_data["lines"], start=1)
        )
