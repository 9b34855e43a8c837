"""The one pagination of our own list endpoints: ``?limit=&cursor=``, newest first.

Keyset pagination over ``(created_at, id)``: a page costs one indexed query however deep it
is, and rows added while a client pages through do not shift what it sees. The cursor is
opaque to callers (base64 of the last row's position).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from django.db.models import Model, Q, QuerySet
from django.utils.dateparse import parse_datetime
from rest_framework.pagination import BasePagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param
from rest_framework.views import APIView

from accounts.api.errors import UnprocessableEntity


def _cursor_encode(row: Model) -> str:
    position = json.dumps([row.created_at.isoformat(), row.pk])
    return base64.urlsafe_b64encode(position.encode()).decode().rstrip("=")


def _cursor_decode(cursor: str) -> tuple[Any, Any]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        created_at, pk = json.loads(base64.urlsafe_b64decode(padded.encode()))
        parsed = parse_datetime(created_at)
    except (ValueError, TypeError, binascii.Error, json.JSONDecodeError):
        parsed = None
    if parsed is None:
        raise UnprocessableEntity({"cursor": ["Invalid cursor."]})
    return parsed, pk


class KeysetPage(BasePagination):
    default_limit = 50
    max_limit = 1000

    def __init__(self) -> None:
        self.next_cursor: str | None = None
        self.request: Request | None = None

    def _limit(self, request: Request) -> int:
        raw = request.query_params.get("limit")
        if raw in (None, ""):
            return self.default_limit
        try:
            limit = int(raw)
        except ValueError:
            limit = 0
        if not 1 <= limit <= self.max_limit:
            raise UnprocessableEntity({"limit": [f"An integer from 1 to {self.max_limit}."]})
        return limit

    def paginate_queryset(
        self, queryset: QuerySet, request: Request, view: APIView | None = None
    ) -> list[Model]:
        self.request = request
        limit = self._limit(request)
        cursor = request.query_params.get("cursor")
        if cursor:
            created_at, pk = _cursor_decode(cursor)
            queryset = queryset.filter(
                Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=pk)
            )
        rows = list(queryset.order_by("-created_at", "-id")[: limit + 1])
        if len(rows) > limit:
            rows = rows[:limit]
            self.next_cursor = _cursor_encode(rows[-1])
        return rows

    def get_paginated_response(self, data: list[Any]) -> Response:
        next_url = None
        if self.next_cursor is not None and self.request is not None:
            next_url = replace_query_param(
                self.request.build_absolute_uri(), "cursor", self.next_cursor
            )
        return Response({"next": next_url, "next_cursor": self.next_cursor, "results": data})

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["results"],
            "properties": {
                "next": {"type": "string", "nullable": True, "format": "uri"},
                "next_cursor": {"type": "string", "nullable": True},
                "results": schema,
            },
        }

    def get_schema_operation_parameters(self, view: APIView) -> list[dict[str, Any]]:
        return [
            {
                "name": "limit",
                "in": "query",
                "required": False,
                "schema": {"type": "integer", "minimum": 1, "maximum": self.max_limit},
            },
            {"name": "cursor", "in": "query", "required": False, "schema": {"type": "string"}},
        ]
