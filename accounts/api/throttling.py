"""Per-key rate limits: a fixed-window counter in Redis, one round trip per request."""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING

import redis
from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from mirix_site.redis import redis_client

logger = logging.getLogger(__name__)

_PERIOD_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

if TYPE_CHECKING:
    from rest_framework.views import APIView


def rate_parse(rate: str) -> tuple[int, int]:
    """``"6000/m"`` → (6000 requests, 60 seconds). Rates are validated by the settings reader."""
    count, period = rate.split("/")
    return int(count), _PERIOD_SECONDS[period[0]]


class ApiKeyRateThrottle(BaseThrottle):
    """At most ``API_RATE_LIMIT`` requests per key and window. Unlike DRF's SimpleRateThrottle,
    which stores every request's timestamp, this keeps one counter per key and window.
    If Redis is unreachable the request is let through: an outage of the rate limiter must not
    become an outage of the API."""

    def __init__(self) -> None:
        self.retry_after: float | None = None

    def allow_request(self, request: Request, view: APIView) -> bool:
        api_key = request.auth
        if api_key is None:
            return True
        limit, period = rate_parse(settings.API_RATE_LIMIT)
        now = time.time()
        window = int(now // period)
        counter = f"mirix:throttle:{api_key.key_id}:{window}"
        try:
            pipeline = redis_client().pipeline(transaction=False)
            pipeline.incr(counter)
            pipeline.expire(counter, period + 1)
            used, _ = pipeline.execute()
        except redis.RedisError:
            logger.warning("rate limiter unavailable (Redis error); request allowed")
            return True
        if used <= limit:
            return True
        self.retry_after = max(1.0, math.ceil((window + 1) * period - now))
        return False

    def wait(self) -> float | None:
        return self.retry_after
