"""Per-key rate limits: a fixed-window counter in Redis (see accounts.keycache)."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

if TYPE_CHECKING:
    from rest_framework.views import APIView


class ApiKeyRateThrottle(BaseThrottle):
    """At most ``API_RATE_LIMIT`` requests per key and window. The count is taken by the
    authentication's Redis round trip (``request.key_gate``); unlike DRF's SimpleRateThrottle,
    which stores every request's timestamp, it is one counter per key and window. If Redis is
    unreachable the request is let through: an outage of the rate limiter must not become an
    outage of the API."""

    def __init__(self) -> None:
        self.retry_after: float | None = None

    def allow_request(self, request: Request, view: APIView) -> bool:
        gate = getattr(request, "key_gate", None)
        if gate is None or gate.rate_used is None or gate.rate_used <= gate.rate_limit:
            return True
        self.retry_after = max(1.0, math.ceil(gate.window_ends_at - time.time()))
        return False

    def wait(self) -> float | None:
        return self.retry_after
