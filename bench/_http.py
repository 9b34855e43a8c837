"""Shared helpers of the benchmarks: a keep-alive HTTP load generator and percentiles."""

from __future__ import annotations

import http.client
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_BASE_URL = "http://127.0.0.1:8531"
DEFAULT_KEY_FILE = Path(__file__).resolve().parent.parent / ".mirix-data" / "demo-api-key"


@dataclass
class LoadResult:
    label: str
    latencies_ms: list[float]
    seconds: float
    statuses: dict[int, int]

    @property
    def requests_per_second(self) -> float:
        return len(self.latencies_ms) / self.seconds

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]

    def line(self) -> str:
        return (
            f"{self.label:<28} {self.requests_per_second:8.0f} req/s   "
            f"p50 {self.percentile(0.50):6.2f} ms   p95 {self.percentile(0.95):6.2f} ms   "
            f"mean {statistics.fmean(self.latencies_ms):6.2f} ms   statuses {self.statuses}"
        )


RequestFactory = Callable[[int, int], tuple[str, str, bytes | None]]


def run_load(
    *,
    label: str,
    base_url: str,
    headers: dict[str, str],
    threads: int,
    requests_per_thread: int,
    request: RequestFactory,
) -> LoadResult:
    """``threads`` keep-alive connections, each sending ``requests_per_thread`` requests built by
    ``request(thread_index, request_index) -> (method, path, body)``."""
    parts = urlsplit(base_url)
    latencies: list[list[float]] = [[] for _ in range(threads)]
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    start_barrier = threading.Barrier(threads + 1)

    def worker(index: int) -> None:
        connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=30)
        seen: dict[int, int] = {}
        start_barrier.wait()
        for number in range(requests_per_thread):
            method, path, body = request(index, number)
            began = time.perf_counter()
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            response.read()
            latencies[index].append((time.perf_counter() - began) * 1000)
            seen[response.status] = seen.get(response.status, 0) + 1
        connection.close()
        with lock:
            for status, count in seen.items():
                statuses[status] = statuses.get(status, 0) + count

    workers = [threading.Thread(target=worker, args=(index,)) for index in range(threads)]
    for thread in workers:
        thread.start()
    start_barrier.wait()
    began = time.perf_counter()
    for thread in workers:
        thread.join()
    seconds = time.perf_counter() - began
    return LoadResult(label, [value for chunk in latencies for value in chunk], seconds, statuses)
