"""What the benchmarks share: the server they talk to and its key, a keep-alive HTTP client for
requests outside a load, a load generator, percentiles, and the options every bench takes.

Every bench has a smoke mode (``--smoke``): each step of the full run (load, measure, report,
clean up) on a few hundred rows or requests at most, in seconds, so that ``make test`` runs
every bench against a live server (``tests/test_bench.py``) and a bench cannot rot unnoticed.
Its figures mean nothing; figures come from full runs, by hand.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

PROJECT_DIR = Path(__file__).resolve().parent.parent
DEFAULT_BASE_URL = "http://127.0.0.1:8531"
DEFAULT_KEY_FILE = PROJECT_DIR / ".mirix-data" / "demo-api-key"
PROGRESS_EVERY_SECONDS = 10.0
RATE_LIMIT_HINT = (
    "429 Too Many Requests: restart the server with the rate limit raised, "
    "API_RATE_LIMIT=10000000/min make run"
)
# gunicorn closes a keep-alive connection after a few idle seconds; a write must not meet that.
IDLE_RECONNECT_SECONDS = 1.0
DROPPED = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
SMOKE_NOTE = "smoke run: every step ran, on a few rows; its figures and verdicts mean nothing"


class BenchError(Exception):
    """The run cannot go on (a refused key, a stalled worker, a server on another database);
    the message says why."""


def percentile(values: Sequence[float], fraction: float) -> float:
    """The value below which ``fraction`` of them fall; NaN when there are none."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else math.nan


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as a run prints them beside its figures."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def command_line(module: str, argv: Sequence[str]) -> str:
    """The command as a run prints and keeps it, without the API key's secret."""
    shown, hide_next = [], False
    for argument in argv:
        if hide_next:
            shown.append("<key>")
        elif argument.startswith("--api-key="):
            shown.append("--api-key=<key>")
        else:
            shown.append(argument)
        hide_next = argument == "--api-key"
    return shlex.join([Path(sys.executable).name, "-m", module, *shown])


# --- Options -------------------------------------------------------------------------------------


def server_arguments(parser: argparse.ArgumentParser, *, key_help: str | None = None) -> None:
    """``--base-url``, ``--api-key`` and ``--smoke``, which every bench takes."""
    parser.add_argument("--base-url", default=DEFAULT_BASE_URL)
    parser.add_argument(
        "--api-key", default=None, help=key_help or f"default: the key in {DEFAULT_KEY_FILE}"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="every step on a few rows, in seconds: checks that the bench runs; figures mean "
        "nothing (other options still apply)",
    )


def arguments_parse(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None, *, smoke: dict[str, Any]
) -> argparse.Namespace:
    """``argv`` (None: the command line's); with ``--smoke``, ``smoke`` replaces the defaults
    of the options it names, and an option given still wins."""
    peek = argparse.ArgumentParser(add_help=False)
    peek.add_argument("--smoke", action="store_true")
    if peek.parse_known_args(argv)[0].smoke:
        parser.set_defaults(**smoke)
    return parser.parse_args(argv)


def api_key_read(arguments: argparse.Namespace, *, key_file: Path = DEFAULT_KEY_FILE) -> str:
    """``--api-key``, else the key ``make run`` wrote."""
    if arguments.api_key:
        return arguments.api_key
    if not key_file.exists():
        raise BenchError(f"no --api-key and no {key_file} (make run writes it)")
    return key_file.read_text().strip()


# --- One connection, one request at a time --------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    headers: http.client.HTTPMessage
    elapsed_ms: float  # request sent to body read (after a reconnect: the second attempt's)

    def payload(self) -> object:
        """The body as JSON (None when empty; its first 200 characters when not JSON)."""
        try:
            return json.loads(self.body) if self.body else None
        except ValueError:
            return self.body.decode(errors="replace")[:200]


class KeepAliveClient:
    """One keep-alive connection for the requests outside a load: probes, polls, searches timed
    one at a time. A GET that meets a connection the server closed (gunicorn drops idle ones) is
    sent again on a new one and counted in ``reconnects``; anything else is not (an add sent
    twice would count twice), and goes on a fresh connection after an idle pause instead."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0) -> None:
        parts = urlsplit(base_url)
        self.connection = http.client.HTTPConnection(
            parts.hostname or "127.0.0.1", parts.port or 80, timeout=timeout
        )
        self.headers = {"X-API-Key": api_key}
        self.last_used = time.monotonic()
        self.reconnects = 0

    def exchange(self, method: str, path: str, body: bytes | None = None) -> Reply:
        if method != "GET" and time.monotonic() - self.last_used > IDLE_RECONNECT_SECONDS:
            self.connection.close()
        try:
            began = time.perf_counter()
            try:
                response = self._send(method, path, body)
            except DROPPED:
                if method != "GET":
                    raise
                self.connection.close()
                self.reconnects += 1
                began = time.perf_counter()
                response = self._send(method, path, body)
            content = response.read()
            elapsed_ms = (time.perf_counter() - began) * 1000
        finally:
            self.last_used = time.monotonic()
        return Reply(response.status, content, response.headers, elapsed_ms)

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, object]:
        """The status and the JSON payload."""
        reply = self.exchange(method, path, body)
        return reply.status, reply.payload()

    def close(self) -> None:
        self.connection.close()

    def _send(self, method: str, path: str, body: bytes | None) -> http.client.HTTPResponse:
        headers = self.headers
        if body is not None:
            headers = headers | {"Content-Type": "application/json"}
        self.connection.request(method, path, body=body, headers=headers)
        return self.connection.getresponse()


# --- Load ----------------------------------------------------------------------------------------


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
        return percentile(self.latencies_ms, fraction)

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
    ``request(thread_index, request_index) -> (method, path, body)``. A connection that fails
    stops its thread; the first such error is raised once all threads are done."""
    parts = urlsplit(base_url)
    latencies: list[list[float]] = [[] for _ in range(threads)]
    statuses: dict[int, int] = {}
    errors: list[OSError | http.client.HTTPException] = []
    lock = threading.Lock()
    start_barrier = threading.Barrier(threads + 1)

    def worker(index: int) -> None:
        connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=30)
        seen: dict[int, int] = {}
        start_barrier.wait()
        try:
            for number in range(requests_per_thread):
                method, path, body = request(index, number)
                began = time.perf_counter()
                connection.request(method, path, body=body, headers=headers)
                response = connection.getresponse()
                response.read()
                latencies[index].append((time.perf_counter() - began) * 1000)
                seen[response.status] = seen.get(response.status, 0) + 1
        except (OSError, http.client.HTTPException) as error:
            errors.append(error)
        finally:
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
    if errors:
        raise errors[0]
    return LoadResult(label, [value for chunk in latencies for value in chunk], seconds, statuses)
