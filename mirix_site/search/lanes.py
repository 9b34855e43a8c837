"""Running a search lane on its own database connection, beside the request's.

A hybrid search's BM25 and vector lanes are independent queries; one connection runs them one
after the other, two run them at once. The second connection belongs to a small per-process
thread pool (Django's connections are per thread). It cannot see rows the caller's open
transaction has not committed, so a caller inside ``transaction.atomic`` gets the lane run in
its own thread instead: same answer, one after the other.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

from django.conf import settings
from django.db import connection

T = TypeVar("T")

# One pool per process id: a pool made before a fork (gunicorn, Celery prefork) has no threads
# in the child, so each process makes its own on first use. With it, its number of threads.
_pools: dict[int, tuple[ThreadPoolExecutor, int]] = {}
_pools_lock = threading.Lock()


def _lane_pool() -> ThreadPoolExecutor:
    with _pools_lock:
        if os.getpid() not in _pools:
            threads = settings.SEARCH_LANE_THREADS
            pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="search-lane")
            _pools[os.getpid()] = (pool, threads)
        return _pools[os.getpid()][0]


def lanes_close() -> None:
    """Close the pool threads' connections and stop them (a test run does, before it drops its
    database). Every thread takes one closing task: each waits for the others at a barrier."""
    with _pools_lock:
        pool, threads = _pools.pop(os.getpid(), (None, 0))
    if pool is None:
        return
    barrier = threading.Barrier(threads)

    def close() -> None:
        connection.close()
        barrier.wait(timeout=30)

    for _ in range(threads):
        pool.submit(close)
    pool.shutdown(wait=True)


def _on_pool_connection(function: Callable[[], T]) -> T:
    # Django closes request threads' connections when they outlive CONN_MAX_AGE or break; a
    # pool thread has no requests, so it does the same around each lane.
    connection.close_if_unusable_or_obsolete()
    try:
        return function()
    finally:
        connection.close_if_unusable_or_obsolete()


class Lane(Generic[T]):
    """A lane started now and joined later: beside the caller when asked and it may be (in
    the pool), else run in the caller's thread at join."""

    def __init__(self, function: Callable[[], T], *, beside: bool) -> None:
        self._function = function
        self._future: Future[T] | None = None
        if beside and settings.SEARCH_LANE_THREADS > 0 and not connection.in_atomic_block:
            self._future = _lane_pool().submit(_on_pool_connection, function)

    def result(self) -> T:
        if self._future is None:
            return self._function()
        return self._future.result()
