"""``GET /health``: is this process able to reach its database and Redis, which node is it
(``NODE_NAME``), and how are the processes that node runs (``NODE_PROCESSES``)? No
authentication."""

from __future__ import annotations

import logging

import redis
from django.conf import settings
from django.db import DatabaseError, connection
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

import mirix_site
from mirix_site.api.fields import TextChoiceField, TextField
from mirix_site.beat import beat_state_read
from mirix_site.common.redis import redis_client
from mirix_site.nodes import worker_heartbeat_key

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


def worker_state() -> str:
    """``running`` while a worker of this node renews its heartbeat (mirix_site.celery)."""
    try:
        alive = redis_client().exists(worker_heartbeat_key(settings.NODE_NAME))
    except redis.RedisError:
        return "unknown"
    return "running" if alive else "down"


def beat_state() -> str:
    """``active`` (schedules for every node), ``standby`` or ``down``: mirix_site.beat."""
    try:
        return beat_state_read(node=settings.NODE_NAME)
    except DatabaseError:
        logger.warning("health: database unreachable", exc_info=True)
        return "unknown"


def processes_state(*, database: bool, redis_up: bool) -> dict[str, str]:
    """This node's processes (the web one answering): what a load balancer or an operator
    needs to know of it. A state that the unreachable service would tell is ``unknown``."""
    states = {"web": "running"}
    if "worker" in settings.NODE_PROCESSES:
        states["worker"] = worker_state() if redis_up else "unknown"
    if "beat" in settings.NODE_PROCESSES:
        states["beat"] = beat_state() if database else "unknown"
    return states


HEALTH = inline_serializer(
    "Health",
    {
        "status": TextChoiceField(["ok", "degraded", "unavailable"]),
        "database": TextChoiceField(["ok", "down"]),
        "redis": TextChoiceField(["ok", "down"]),
        "version": TextField(),
        "node": TextField(help_text="NODE_NAME: which node answered"),
        "processes": inline_serializer(
            "HealthProcesses",
            {
                "web": TextChoiceField(["running"]),
                "worker": TextChoiceField(["running", "down", "unknown"], required=False),
                "beat": TextChoiceField(
                    ["active", "standby", "down", "unknown"],
                    required=False,
                    help_text="active: this node's beat schedules for every node",
                ),
            },
            help_text="What this node runs (NODE_PROCESSES), and how each is",
        ),
    },
)


class HealthApi(APIView):
    """200 while the database answers (Redis down only degrades: adds are still stored and
    processed later); 503 when the database is down. The state of the node's worker and beat
    leaves ``status`` alone: this process serves requests whatever they are."""

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
            "node": settings.NODE_NAME,
            "processes": processes_state(database=database, redis_up=redis_up),
        }
        return Response(body, status=200 if database else 503)
