"""The per-request Redis round trip of an API call: the API key's cached record, its
"recently changed" marker, its rate-limit counter and the caller's address's count of failed
authentications, fetched in one pipeline.

Why a cache: the key lookup is the one database query every request makes; reading the record
from Redis in the same round trip as the rate counter saves that query (bench/auth.py).

Why it stays correct: every change to a key (revoke, delete, edit, and the cascades of
organization or client deletion) sets a marker for longer than any cache entry lives. While
the marker exists the cache is ignored and the database decides, so a request that cached the
key just before it was revoked cannot keep it alive. If Redis is unreachable every request goes
to the database, and rate limiting is skipped. The one gap: a change made while Redis is
unreachable cannot set the marker, so an entry cached before it may be served for up to
``CACHE_SECONDS`` once Redis is back; the change is logged as an error when that happens.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import redis
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.http import HttpRequest

from accounts.models import ApiKey
from accounts.selectors import API_KEY_RECORD, api_key_hydrate
from mirix_site.common.redis import redis_client

logger = logging.getLogger(__name__)

CACHE_SECONDS = 60
MARKER_SECONDS = 3 * CACHE_SECONDS
_PERIOD_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class KeyGate:
    """What the round trip found. ``rate_used`` is None when Redis was unreachable;
    ``address_blocked_for`` is the seconds the caller's address stays refused (None if not)."""

    cached: ApiKey | None
    changed_recently: bool
    rate_used: int | None
    rate_limit: int
    window_ends_at: float
    address_blocked_for: float | None = None


def rate_parse(rate: str) -> tuple[int, int]:
    """``"6000/m"`` → (6000 requests, 60 seconds). Rates are validated by the settings reader."""
    count, period = rate.split("/")
    return int(count), _PERIOD_SECONDS[period[0]]


def _record_key(key_id: str) -> str:
    return f"mirix:apikey:{key_id}"


def _marker_key(key_id: str) -> str:
    return f"mirix:apikey-changed:{key_id}"


def _counter_key(key_id: str, presented_digest: str, window: int) -> str:
    # Counted per presented secret, not per key id: requests with a guessed or wrong secret
    # (the key id is not secret) land on their own counters and cannot use up a key's limit.
    return f"mirix:throttle:{key_id}:{presented_digest[:16]}:{window}"


def _failures_key(scope: str, address: str, window: int) -> str:
    return f"mirix:failures:{scope}:{address}:{window}"


@dataclass(frozen=True)
class _Window:
    limit: int
    period: int
    index: int

    @classmethod
    def now(cls, rate: str) -> _Window:
        limit, period = rate_parse(rate)
        return cls(limit, period, int(time.time() // period))

    @property
    def seconds_left(self) -> float:
        return max(1.0, math.ceil((self.index + 1) * self.period - time.time()))


def _blocked_for(window: _Window, failures: bytes | int | None) -> float | None:
    return window.seconds_left if int(failures or 0) >= window.limit else None


def client_address(request: HttpRequest) -> str:
    """The address failed authentications are counted against: the peer's. Behind a proxy
    that is the proxy's, so there the limit applies to everyone it forwards; set it high
    (AUTH_FAILURE_RATE_LIMIT) or limit at the proxy."""
    return request.META.get("REMOTE_ADDR") or "unknown"


def address_blocked_for(*, scope: str, address: str, rate: str) -> float | None:
    """Seconds until an address that failed ``rate`` times in this window may try again
    (``scope`` keeps the API's and the admin login's counts apart); None if it may try now,
    or if Redis is unreachable (a rate limiter's outage must not lock everyone out)."""
    window = _Window.now(rate)
    try:
        failures = redis_client().get(_failures_key(scope, address, window.index))
    except redis.RedisError:
        logger.warning("Redis unreachable: failed authentications not limited")
        return None
    return _blocked_for(window, failures)


def address_failure_record(*, scope: str, address: str, rate: str) -> None:
    """Count one failed authentication from the address in the current window."""
    window = _Window.now(rate)
    key = _failures_key(scope, address, window.index)
    try:
        pipeline = redis_client().pipeline(transaction=False)
        pipeline.incr(key)
        pipeline.expire(key, window.period + 1)
        pipeline.execute()
    except redis.RedisError:
        logger.warning("Redis unreachable: a failed authentication was not counted")


def _fields(model: type[models.Model]) -> list[models.Field]:
    return list(model._meta.concrete_fields)


def _dump(api_key: ApiKey) -> str:
    instances = (api_key, api_key.client, api_key.client.organization)
    rows = {
        model.__name__: {
            field.attname: getattr(instance, field.attname) for field in _fields(model)
        }
        for model, instance in zip(API_KEY_RECORD, instances, strict=True)
    }
    return json.dumps(rows, cls=DjangoJSONEncoder)


def _load(raw: bytes) -> ApiKey | None:
    try:
        rows: dict[str, dict[str, Any]] = json.loads(raw)
        values = [
            field.to_python(rows[model.__name__][field.attname])
            for model in API_KEY_RECORD
            for field in _fields(model)
        ]
        return api_key_hydrate(values=values, from_cursor=False)
    except (ValueError, KeyError, TypeError):
        return None  # written by another version of the code: ignore it, the database decides


def key_gate(
    *, key_id: str, presented_digest: str, rate: str, address: str, failures_rate: str
) -> KeyGate:
    """One pipeline: the cached record, the change marker, this request's count in the
    current rate window, and the address's failed authentications in theirs."""
    window = _Window.now(rate)
    failures_window = _Window.now(failures_rate)
    counter = _counter_key(key_id, presented_digest, window.index)
    window_ends_at = (window.index + 1) * window.period
    try:
        client = redis_client()
        pipeline = client.pipeline(transaction=False)
        pipeline.mget(
            _record_key(key_id),
            _marker_key(key_id),
            _failures_key("api", address, failures_window.index),
        )
        pipeline.incr(counter)
        (raw, marker, failures), used = pipeline.execute()
        if used == 1:
            # First request of the window: the counter is new and needs its expiry. Once per
            # key and window, so the common request stays at one round trip of two commands.
            client.expire(counter, window.period + 1)
    except redis.RedisError:
        logger.warning("Redis unreachable: API key read from the database, rate limit skipped")
        return KeyGate(None, False, None, window.limit, window_ends_at)
    cached = _load(raw) if raw and not marker else None
    return KeyGate(
        cached,
        bool(marker),
        int(used),
        window.limit,
        window_ends_at,
        _blocked_for(failures_window, failures),
    )


def key_cache_store(api_key: ApiKey) -> None:
    try:
        redis_client().set(_record_key(api_key.key_id), _dump(api_key), ex=CACHE_SECONDS)
    except redis.RedisError:
        logger.warning("Redis unreachable: API key not cached")


def key_cache_invalidate(key_id: str) -> None:
    try:
        pipeline = redis_client().pipeline(transaction=False)
        pipeline.set(_marker_key(key_id), "1", ex=MARKER_SECONDS)
        pipeline.delete(_record_key(key_id))
        pipeline.execute()
    except redis.RedisError:
        logger.error(
            "Redis unreachable while API key %s changed: a copy cached before the change may be "
            "served for up to %s seconds after Redis returns",
            key_id,
            CACHE_SECONDS,
        )
