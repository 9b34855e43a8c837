"""Fault recovery of a running server with its default settings, timed as a user sees it.

1. ``worker``: ``--backlog`` two-turn adds over ``--users`` users, then, ``--kill-after`` seconds
   later, one Celery worker child is killed with SIGKILL while the backlog is being worked
   through. Timed: until every turn is extracted, against the same backlog without a kill just
   before; counted: turns lost and memories stored twice (the deterministic extractor stores one
   episodic memory per exchange, so each user must end with as many as the adds it was sent).
2. ``redis``: Redis stopped for ``--outage`` seconds while adds arrive (each must answer 202; the
   slowest is reported), then started. Nothing else is added afterwards, so what brings the turns
   stored meanwhile is the recovery beat job (every minute, work older than
   ``EXTRACTION_REQUEUE_AFTER``, 2 minutes). Timed: Redis back until they are all extracted.
3. ``postgres``: PostgreSQL stopped for ``--outage`` seconds under a load of adds and searches
   (one connection, one request at a time), then started. Reported: the answers by status (the
   outage must be 503 in the error shape, never a 500); timed: PostgreSQL back until the first
   2xx, and until every add answered 202 is extracted.

It stops and starts the embedded PostgreSQL and Redis of ``MIRIX_DATA_DIR`` (the launcher's
helpers, as ``make run`` started them) and finds the worker's children in ``/proc`` (the worker
whose ``DATABASE_URL`` names that data directory's PostgreSQL), so it runs on the server's machine,
as root if the server does. The same faults, asserted, are ``tests/test_faults.py``.

    make run
    .venv/bin/python -m bench.faults [--faults worker,redis,postgres] [--outage 5]
        [--backlog 400] [--users 40] [--base-url URL] [--api-key KEY] [--smoke]

In ``--smoke`` mode the redis step does not wait for the recovery job (the test stack runs no
beat) and says so; it times a new add made once Redis is back instead (the worker consumes again).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests

from bench.common import (
    RATE_LIMIT_HINT,
    SMOKE_NOTE,
    BenchError,
    KeepAliveClient,
    api_key_read,
    arguments_parse,
    episodic_count,
    run_load,
    server_arguments,
)
from mirix_site import launcher

FAULTS = ("worker", "redis", "postgres")
SMOKE = {"outage": 1.0, "backlog": 24, "users": 4, "kill_after": 0.0, "timeout": 60.0}
UNAVAILABLE = {"detail": "The database is unavailable; try again shortly.", "code": "unavailable"}


def _add_body(user_id: str, text: str) -> bytes:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": text}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Noted."}]},
    ]
    return json.dumps({"user_id": user_id, "messages": messages}).encode()


def _wait_extracted(
    client: KeepAliveClient, expected: Counter[str], *, timeout: float
) -> tuple[float, int]:
    """Polls until every user has its expected episodic memories; returns the moment
    (``monotonic``) and how many memories are over the count (stored twice)."""
    deadline = time.monotonic() + timeout
    pending = set(expected)
    extra = 0
    while pending:
        for user_id in sorted(pending):
            count = episodic_count(client, user_id)
            if count >= expected[user_id]:
                pending.discard(user_id)
                extra += count - expected[user_id]
        if pending:
            if time.monotonic() > deadline:
                raise BenchError(f"{len(pending)} users not extracted after {timeout:.0f} s")
            time.sleep(0.2)
    return time.monotonic(), extra


# --- The worker ----------------------------------------------------------------------------------


def worker_children(data_dir: Path) -> list[int]:
    """The pool children of the Celery worker on this data directory's PostgreSQL."""
    marker = str(data_dir / "pg").encode()
    workers: dict[int, int] = {}  # pid -> parent pid
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        names = [Path(part.decode(errors="replace")).name for part in argv]
        if "celery" in names and b"worker" in argv:
            database = next((v for v in environ if v.startswith(b"DATABASE_URL=")), b"")
            if marker in database:
                workers[int(entry.name)] = parent
    return sorted(pid for pid, parent in workers.items() if parent in workers)


def _backlog(arguments: argparse.Namespace, client: KeepAliveClient, prefix: str) -> Counter[str]:
    """``--backlog`` adds over ``--users`` users, sent by two connections; returns the adds per
    user once all are accepted."""
    users = [f"{prefix}-{number}" for number in range(arguments.users)]
    expected: Counter[str] = Counter()
    bodies = []
    for number in range(arguments.backlog):
        user_id = users[number % len(users)]
        expected[user_id] += 1
        bodies.append(_add_body(user_id, f"Backlog turn {number} of {user_id}."))
    threads = 2
    result = run_load(
        label="backlog POST /memory/add",
        base_url=arguments.base_url,
        headers=client.headers | {"Content-Type": "application/json"},
        threads=threads,
        requests_per_thread=len(bodies) // threads,
        request=lambda index, number: ("POST", "/memory/add", bodies[number * threads + index]),
    )
    if set(result.statuses) != {202}:
        raise BenchError(f"backlog adds answered {result.statuses}")
    return expected


def fault_worker(arguments: argparse.Namespace, client: KeepAliveClient, run: str) -> None:
    children = worker_children(arguments.data_dir)
    if not children:
        raise BenchError(f"no Celery worker children on {arguments.data_dir / 'pg'} found")
    messages = 2 * (arguments.backlog - arguments.backlog % 2)
    # The same backlog without a kill first: what the kill costs is the difference.
    expected = _backlog(arguments, client, f"{run}-unharmed")
    sent = time.monotonic()
    done, _extra = _wait_extracted(client, expected, timeout=arguments.timeout)
    print(f"worker: {messages} messages of a backlog extracted in {done - sent:.2f} s, no kill")

    expected = _backlog(arguments, client, f"{run}-worker")
    sent = time.monotonic()
    time.sleep(arguments.kill_after)
    victim = children[0]
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    left = sum(count - min(episodic_count(client, user), count) for user, count in expected.items())
    done, extra = _wait_extracted(client, expected, timeout=arguments.timeout)
    print(
        f"worker: child {victim} SIGKILLed {killed - sent:.2f} s after the backlog was in, "
        f"{2 * left} of {messages} messages not yet extracted; all were {done - sent:.2f} s "
        f"after the backlog was in; lost 0, stored twice {extra}"
    )
    if extra:
        raise BenchError(f"{extra} memories stored twice")


# --- Redis ---------------------------------------------------------------------------------------


def fault_redis(arguments: argparse.Namespace, client: KeepAliveClient, run: str) -> None:
    redis_dir = arguments.data_dir / "redis"
    users = [f"{run}-redis-{number}" for number in range(3)]
    expected: Counter[str] = Counter()
    slowest = 0.0
    stopping = time.monotonic()
    launcher.redis_stop(redis_dir)
    try:
        number = 0
        # One add per user at least: stopping Redis can take longer than a short --outage.
        while number < len(users) or time.monotonic() < stopping + arguments.outage:
            user_id = users[number % len(users)]
            reply = client.exchange("POST", "/memory/add", _add_body(user_id, f"Turn {number}."))
            if reply.status != 202:
                raise BenchError(f"an add while Redis was down answered {reply.status}")
            expected[user_id] += 1
            slowest = max(slowest, reply.elapsed_ms)
            number += 1
            time.sleep(0.2)
    finally:
        launcher.redis_ensure(redis_dir)
    back = time.monotonic()
    print(
        f"redis: down {back - stopping:.2f} s, {sum(expected.values())} adds answered 202, "
        f"slowest {slowest:.0f} ms"
    )
    if arguments.smoke:
        # What the recovery job would bring takes minutes; that the worker consumes again does not.
        user_id = f"{run}-redis-after"
        reply = client.exchange("POST", "/memory/add", _add_body(user_id, "Turn after."))
        if reply.status != 202:
            raise BenchError(f"an add after Redis came back answered {reply.status}")
        done, _extra = _wait_extracted(client, Counter({user_id: 1}), timeout=arguments.timeout)
        print(f"redis: a new add extracted {done - back:.2f} s after it came back")
        print("redis: not waiting for the recovery job (smoke mode)")
        return
    done, extra = _wait_extracted(client, expected, timeout=arguments.timeout)
    print(
        f"redis: the adds made while it was down extracted {done - back:.2f} s after it came "
        f"back (recovery beat job); stored twice {extra}"
    )


# --- PostgreSQL ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    sent: float  # monotonic
    kind: str  # "add" or "search"
    status: int  # 0: no HTTP answer at all
    body: Any
    retry_after: str | None
    user_id: str
    text: str | None  # an add's turn


class Load(threading.Thread):
    """A client of one or more API keys sending adds and searches in turn, each as soon as the
    last is answered (after a short pause), recording every answer. Users are ``user_id`` under
    each key; an add's user turn is ``note <prefix> <number>``."""

    def __init__(self, url: str, keys: Sequence[str], *, user_id: str, prefix: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.keys = list(keys)
        self.user_id = user_id
        self.prefix = prefix
        self.session = requests.Session()
        self.answers: list[Answer] = []
        self.done = threading.Event()

    def run(self) -> None:
        number = 0
        while not self.done.is_set():
            self.session.headers["X-API-Key"] = self.keys[number // 2 % len(self.keys)]
            if number % 2 == 0:
                text = f"note {self.prefix} {number}"
                self._send("add", "POST", "/memory/add", text, data=_add_body(self.user_id, text))
            else:
                query = {"user_id": self.user_id, "query": f"note {self.prefix}"}
                self._send("search", "GET", "/memory/search", None, params=query)
            number += 1
            time.sleep(0.05)

    def _send(self, kind: str, method: str, path: str, text: str | None, **options: Any) -> None:
        sent = time.monotonic()
        headers = {"Content-Type": "application/json"}
        try:
            response = self.session.request(
                method, f"{self.url}{path}", timeout=15, headers=headers, **options
            )
        except requests.RequestException as error:
            self.answers.append(Answer(sent, kind, 0, repr(error), None, self.user_id, text))
            return
        try:
            body = response.json()
        except ValueError:
            body = response.text[:300]
        retry_after = response.headers.get("Retry-After")
        self.answers.append(
            Answer(sent, kind, response.status_code, body, retry_after, self.user_id, text)
        )

    def answered(
        self, *, after: float, ok: bool | None = None, status: int | None = None
    ) -> list[Answer]:
        return [
            answer
            for answer in list(self.answers)
            if answer.sent >= after
            and (ok is None or (answer.status in (200, 202)) == ok)
            and (status is None or answer.status == status)
        ]

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=30)


def _wait(condition: Any, *, timeout: float, what: str) -> float:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic()


def fault_postgres(arguments: argparse.Namespace, client: KeepAliveClient, run: str) -> None:
    pg_dir = arguments.data_dir / "pg"
    user_id = f"{run}-postgres"
    load = Load(arguments.base_url, [client.headers["X-API-Key"]], user_id=user_id, prefix=run)
    load.start()
    try:
        began = time.monotonic()
        _wait(lambda: len(load.answered(after=began, ok=True)) >= 10, timeout=60, what="a load")
        try:
            stopping = time.monotonic()
            launcher.postgres_stop(pg_dir)
            stopped = time.monotonic()
            time.sleep(max(0.0, stopping + arguments.outage - time.monotonic()))
        finally:
            starting = time.monotonic()
            launcher.postgres_ensure(pg_dir)
        back = time.monotonic()
        first_ok = _wait(lambda: load.answered(after=back, ok=True), timeout=60, what="a 2xx")
        _wait(lambda: len(load.answered(after=back, ok=True)) >= 10, timeout=60, what="2xx")
    finally:
        load.stop()
    statuses = Counter(answer.status for answer in load.answers)
    # Sent while the server was certainly down: after the stop returned, before the start.
    down = Counter(a.status for a in load.answered(after=stopped) if a.sent < starting)
    print(
        f"postgres: down {back - stopping:.2f} s; answers {dict(sorted(statuses.items()))}, "
        f"of which sent while it was down {dict(sorted(down.items()))}; first 2xx "
        f"{first_ok - back:.2f} s after it came back"
    )
    wrong = [a for a in load.answers if a.status not in (200, 202, 503)]
    unshaped = [a for a in load.answers if a.status == 503 and a.body != UNAVAILABLE]
    if wrong or unshaped:
        raise BenchError(f"answers other than 2xx or the 503 error shape: {(wrong + unshaped)[:3]}")
    accepted = Counter(answer.user_id for answer in load.answers if answer.status == 202)
    done, extra = _wait_extracted(client, accepted, timeout=arguments.timeout)
    print(
        f"postgres: all {sum(accepted.values())} accepted adds extracted {done - back:.2f} s "
        f"after it came back; stored twice {extra}"
    )


# --- Main ----------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    server_arguments(parser)
    parser.add_argument("--faults", default=",".join(FAULTS), help="comma-separated, in order")
    parser.add_argument(
        "--outage", type=float, default=5.0, help="seconds Redis/PostgreSQL stay down"
    )
    parser.add_argument("--backlog", type=int, default=400, help="adds before the worker kill")
    parser.add_argument("--users", type=int, default=40, help="users of the backlog")
    parser.add_argument("--kill-after", type=float, default=1.0, help="seconds after the backlog")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for work")
    parser.add_argument("--data-dir", type=Path, default=launcher.data_dir(), help="MIRIX_DATA_DIR")
    arguments = arguments_parse(parser, argv, smoke=SMOKE)
    faults = [name for name in arguments.faults.split(",") if name]
    if not set(faults) <= set(FAULTS):
        parser.error(f"--faults: choose from {', '.join(FAULTS)}")
    try:
        api_key = api_key_read(arguments)
    except BenchError as error:
        print(error, file=sys.stderr)
        return 1
    run = "faults-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    client = KeepAliveClient(arguments.base_url, api_key)
    steps = {"worker": fault_worker, "redis": fault_redis, "postgres": fault_postgres}
    print(f"faults {', '.join(faults)} on {arguments.base_url}, data in {arguments.data_dir}")
    try:
        status, payload = client.request("POST", "/memory/add", _add_body(f"{run}-probe", "Hi."))
        if status == 429:
            raise BenchError(RATE_LIMIT_HINT)
        if status != 202:
            raise BenchError(f"POST /memory/add answered {status} {payload}")
        _wait_extracted(client, Counter({f"{run}-probe": 1}), timeout=arguments.timeout)
        for name in faults:
            # A fresh connection per step: the one before may have met a server going away.
            client.close()
            client = KeepAliveClient(arguments.base_url, api_key)
            steps[name](arguments, client, run)
    except BenchError as error:
        print(error, file=sys.stderr)
        return 1
    finally:
        client.close()
    if arguments.smoke:
        print(SMOKE_NOTE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
