"""The one pagination of our own list endpoints: ``?limit=&cursor=``.

Keyset pagination: a page costs one indexed query however deep it is, and rows added while a
client pages through do not shift what it sees. Newest first by ``(created_at, id)`` unless a
view orders otherwise (a session's messages go by ``position``). The cursor is opaque to
callers (base64 of the last row's ordering values).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db.models import Model, Q, QuerySet
from django.utils.dateparse import parse_datetime
from rest_framework.pagination import BasePagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param
from rest_framework.views import APIView

from accounts.api.errors import UnprocessableEntity

# Unpadded base64url, as ``_cursor_encode`` writes it.
CURSOR_PATTERN = "^[A-Za-z0-9_-]*$"


def _value_encode(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


# The ordering keys are times (``*_at``) and integers (ids, positions), PostgreSQL bigints.
_BIGINT = range(-(2**63), 2**63)


def _value_decode(field: str, value: Any) -> Any:
    """A cursor value back to its key's type; anything else is not a cursor we wrote."""
    if field.endswith("_at"):
        parsed = parse_datetime(value) if isinstance(value, str) else None
        if parsed is None:
            raise ValueError(value)
        return parsed
    if isinstance(value, bool) or not isinstance(value, int) or value not in _BIGINT:
        raise ValueError(value)
    return value


def _cursor_encode(row: Model, fields: list[str]) -> str:
    position = json.dumps([_value_encode(getattr(row, field)) for field in fields])
    return base64.urlsafe_b64encode(position.encode()).decode().rstrip("=")


def _cursor_decode(cursor: str, fields: list[str]) -> list[Any]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        # validate: refuse what is not base64url (b64decode would skip it), as the schema does.
        values = json.loads(base64.b64decode(padded.encode(), altchars=b"-_", validate=True))
        if not isinstance(values, list) or len(values) != len(fields):
            raise ValueError(cursor)
        return [_value_decode(field, value) for field, value in zip(fields, values, strict=True)]
    except (ValueError, TypeError, binascii.Error, json.JSONDecodeError):
        raise UnprocessableEntity({"cursor": ["Invalid cursor."]}) from None


def _after(ordering: tuple[str, ...], values: list[Any]) -> Q:
    """Rows strictly after ``values`` in ``ordering`` (lexicographic, per-field direction)."""
    condition = Q()
    for index, key in enumerate(reversed(ordering)):
        field = key.lstrip("-")
        beyond = Q(**{f"{field}__{'lt' if key.startswith('-') else 'gt'}": values[-1 - index]})
        condition = (
            beyond if index == 0 else beyond | (Q(**{field: values[-1 - index]}) & condition)
        )
    return condition


Fetch = Callable[[list[Any] | None, int], list[Any]]


class KeysetPage(BasePagination):
    default_limit = 50
    max_limit = 1000
    # The last key must be unique, so that the cursor names exactly one row.
    ordering: tuple[str, ...] = ("-created_at", "-id")

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
        def fetch(after: list[Any] | None, count: int) -> list[Model]:
            rows = queryset if after is None else queryset.filter(_after(self.ordering, after))
            return list(rows.order_by(*self.ordering)[:count])

        return self.paginate_fetch(fetch, request)

    def paginate_fetch(self, fetch: Fetch, request: Request) -> list[Any]:
        """One page from ``fetch(after, count)``: the first ``count`` rows in ``ordering``
        strictly after the values ``after`` (None: from the start). For a list whose query is
        written by hand; the rows need the ordering fields as attributes."""
        self.request = request
        limit = self._limit(request)
        fields = [key.lstrip("-") for key in self.ordering]
        cursor = request.query_params.get("cursor")
        rows = fetch(_cursor_decode(cursor, fields) if cursor else None, limit + 1)
        if len(rows) > limit:
            rows = rows[:limit]
            self.next_cursor = _cursor_encode(rows[-1], fields)
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
            {
                "name": "cursor",
                "in": "query",
                "required": False,
                "description": "the next_cursor of the previous page, as the server wrote it",
                "schema": {"type": "string", "pattern": CURSOR_PATTERN},
            },
        ]


class PositionPage(KeysetPage):
    """A session's messages, oldest first."""

    ordering = ("position",)
