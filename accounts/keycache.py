"""The per-request Redis round trip of an API call: the API key's cached record, its
"recently changed" marker and its rate-limit counter, fetched in one pipeline.

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
import time
from dataclasses import dataclass
from typing import Any

import redis
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models

from accounts.models import ApiKey
from accounts.selectors import API_KEY_RECORD, api_key_hydrate
from mirix_site.redis import redis_client

logger = logging.getLogger(__name__)

CACHE_SECONDS = 60
MARKER_SECONDS = 3 * CACHE_SECONDS
_PERIOD_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class KeyGate:
    """What the round trip found. ``rate_used`` is None when Redis was unreachable."""

    cached: ApiKey | None
    changed_recently: bool
    rate_used: int | None
    rate_limit: int
    window_ends_at: float


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


def key_gate(*, key_id: str, presented_digest: str, rate: str) -> KeyGate:
    """One pipeline: the cached record, the change marker, and this request's count in the
    current rate window."""
    limit, period = rate_parse(rate)
    now = time.time()
    window = int(now // period)
    counter = _counter_key(key_id, presented_digest, window)
    window_ends_at = (window + 1) * period
    try:
        client = redis_client()
        pipeline = client.pipeline(transaction=False)
        pipeline.mget(_record_key(key_id), _marker_key(key_id))
        pipeline.incr(counter)
        (raw, marker), used = pipeline.execute()
        if used == 1:
            # First request of the window: the counter is new and needs its expiry. Once per
            # key and window, so the common request stays at one round trip of two commands.
            client.expire(counter, period + 1)
    except redis.RedisError:
        logger.warning("Redis unreachable: API key read from the database, rate limit skipped")
        return KeyGate(None, False, None, limit, window_ends_at)
    cached = _load(raw) if raw and not marker else None
    return KeyGate(cached, bool(marker), int(used), limit, window_ends_at)


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
