"""The one pagination of our own list endpoints: ``?limit=&cursor=``.

Keyset pagination: a page costs one indexed query however deep it is, and rows added while a
client pages through do not shift what it sees. Newest first by ``(created_at, id)`` unless a
view orders otherwise (a session's messages go by ``position``).

The cursor is the last row's ordering values, each a number (a time as microseconds since
1970, in UTC), joined by ``_``: ``1733312345678901_4821``. The schema states its whole
format, so that every cursor a client could write is one the server reads (a page after any
such point, perhaps empty), not only the ones it wrote.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Model, Q, QuerySet
from rest_framework.pagination import BasePagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param
from rest_framework.views import APIView

from mirix_site.api.errors import UnprocessableEntity

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# A time's microseconds: 17 digits reach the year 5138, within what datetime holds; an id or
# a position: 18 digits, within PostgreSQL's bigint.
_TIME_DIGITS, _NUMBER_DIGITS = "[0-9]{1,17}", "[0-9]{1,18}"


def _is_time(field: str) -> bool:
    return field.endswith("_at")


def cursor_pattern(fields: list[str]) -> str:
    """The cursor's format for a list ordered by ``fields``."""
    return "^" + "_".join(_TIME_DIGITS if _is_time(f) else _NUMBER_DIGITS for f in fields) + "$"


def _value_encode(value: Any) -> str:
    if isinstance(value, datetime):
        return str((value - _EPOCH) // timedelta(microseconds=1))
    return str(value)


def _cursor_encode(row: Model, fields: list[str]) -> str:
    return "_".join(_value_encode(getattr(row, field)) for field in fields)


def _cursor_decode(cursor: str, fields: list[str]) -> list[Any]:
    if not re.fullmatch(cursor_pattern(fields), cursor):
        raise UnprocessableEntity({"cursor": ["Invalid cursor: the next_cursor of a page."]})
    return [
        _EPOCH + timedelta(microseconds=int(value)) if _is_time(field) else int(value)
        for field, value in zip(fields, cursor.split("_"), strict=True)
    ]


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
                "description": "the next_cursor of the previous page: its last row's ordering "
                "values (a time in microseconds since 1970), joined by _",
                "schema": {
                    "type": "string",
                    "pattern": cursor_pattern([key.lstrip("-") for key in self.ordering]),
                },
            },
        ]


class PositionPage(KeysetPage):
    """A session's messages, oldest first."""

    ordering = ("position",)
