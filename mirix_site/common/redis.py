"""One Redis connection pool per process, for the parts that talk to Redis directly."""

from __future__ import annotations

from functools import cache

import redis
from django.conf import settings


@cache
def redis_client() -> redis.Redis:
    timeout = settings.REDIS_SOCKET_TIMEOUT
    return redis.Redis.from_url(
        settings.REDIS_URL,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        health_check_interval=30,
    )
