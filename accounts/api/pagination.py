"""The one pagination style of our own list endpoints: ``?limit=&cursor=``."""

from __future__ import annotations

from rest_framework.pagination import CursorPagination


class CursorPage(CursorPagination):
    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 1000
    ordering = ("-created_at", "-id")
