"""The keys of the project's session-level PostgreSQL advisory locks, in one place: two locks
that share a key exclude each other for nothing (the posting segments' sync once took beat's
key, and no build ran while a beat held it). Each is a constant below 2**32 (pg_locks shows it
as classid 0, objid KEY). Keys made from ids live apart, far above these
(``memory.services.extraction.RUN_LOCK_BASE``; images' two-key locks)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

VECTOR_INDEX_SYNC = 7_304_211
BEAT = 7_304_212
NODE_PREPARE = 7_304_213
POSTING_SEGMENTS_SYNC = 7_304_214

KEYS = {
    "VECTOR_INDEX_SYNC": VECTOR_INDEX_SYNC,
    "BEAT": BEAT,
    "NODE_PREPARE": NODE_PREPARE,
    "POSTING_SEGMENTS_SYNC": POSTING_SEGMENTS_SYNC,
}


@contextmanager
def held_if_free(key: int) -> Iterator[bool]:
    """Take the session-level lock ``key`` on the default connection if no other session holds
    it; yields whether it was taken, and releases it on the way out."""
    from django.db import connection  # here: the launcher reads the keys before Django is set up

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        taken = cursor.fetchone()[0]
    try:
        yield taken
    finally:
        if taken:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
