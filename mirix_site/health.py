"""``GET /health``: is this process able to reach its database and Redis? No authentication."""

from __future__ import annotations

import logging

import redis
from django.db import DatabaseError, connection
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

import mirix_site
from mirix_site.api.fields import TextChoiceField, TextField
from mirix_site.common.redis import redis_client

logger = logging.getLogger(__name__)


def database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError:
        logger.warning("health: database unreachable", exc_info=True)
        return False
    return True


def redis_ok() -> bool:
    try:
        return bool(redis_client().ping())
    except redis.RedisError:
        logger.warning("health: redis unreachable")
        return False


HEALTH = inline_serializer(
    "Health",
    {
        "status": TextChoiceField(["ok", "degraded", "unavailable"]),
        "database": TextChoiceField(["ok", "down"]),
        "redis": TextChoiceField(["ok", "down"]),
        "version": TextField(),
    },
)


class HealthApi(APIView):
    """200 while the database answers (Redis down only degrades: adds are still stored and
    processed later); 503 when the database is down."""

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]
    throttle_classes: list[type] = []

    @extend_schema(auth=[], responses={200: HEALTH, 503: HEALTH})
    def get(self, request: Request) -> Response:
        database = database_ok()
        redis_up = redis_ok()
        overall = "ok" if database and redis_up else ("degraded" if database else "unavailable")
        body = {
            "status": overall,
            "database": "ok" if database else "down",
            "redis": "ok" if redis_up else "down",
            "version": mirix_site.__version__,
        }
        return Response(body, status=200 if database else 503)
