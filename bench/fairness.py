"""Fairness across tenants: how soon a light tenant's turns become searchable while another
tenant imports a long history.

Two organizations, each with its own API key:

- **Heavy**: imports LongMemEval-S haystacks (``longmemeval_s_cleaned_sample60``, abstention
  questions left out, in file order) until ``--turns`` turns (20,000; the last haystack is cut
  at a session boundary), the way the retrieval bench and real clients send a history: one
  ``POST /memory/add`` per session holding all its turns (user and assistant), each question's
  haystack one end user, a user's sessions in order through one connection, ``--threads``
  users at a time. Then it waits until no message of the import is ``pending`` (read back with
  ``GET /sessions/{id}/messages``, as the retrieval bench does).
- **Light**: one end user of the other organization. From just before the import's first add
  until its last turn is processed, it adds one exchange every ``--interval`` seconds (a user
  turn holding a word no other turn has, and an assistant reply: two messages, one episode) and
  polls ``GET /memory/search?search_method=bm25&memory_type=episodic`` for that word every
  ``--poll-interval`` seconds until the episode found cites the add's messages. Add to
  searchable is from just before the add is sent to the end of the search that found it. The
  oldest exchange still waiting is polled (a user's turns are extracted oldest first); when it
  is found, the next are polled at once.

Reported: the light tenant's add-to-searchable p50 / p95 / max (goal: p95 <= 10 s) and its adds'
own latency, a timeline of both by minute, and the heavy import's adds per second and turns per
second from its first add until its last turn was processed (fairness must not cost
throughput). Before measuring, one light add is waited for (the worker has loaded its model).

Run against a live server started with the rate limit raised, with a key of each organization
(``manage.py create_tenant NAME --client APP`` prints one):

    API_RATE_LIMIT=10000000/min make run
    .venv/bin/python -m bench.fairness --api-key HEAVY_KEY --light-api-key LIGHT_KEY
        [--base-url URL] [--turns 20000] [--threads 4] [--interval 1] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlencode

from bench.common import (
    RATE_LIMIT_HINT,
    SMOKE_NOTE,
    BenchError,
    KeepAliveClient,
    api_key_read,
    arguments_parse,
    percentile,
    server_arguments,
    verdict,
)

# The retrieval bench's own LongMemEval loader, ingest and wait: the heavy tenant imports
# exactly as that bench does.
from bench.retrieval_quality.datasets import (
    DEFAULT_DATA_DIR,
    LONGMEMEVAL_FILE,
    Haystack,
    longmemeval_load,
)
from bench.retrieval_quality.ingest import Clients, _ingest, _wait_until_extracted

GOAL_P95_SECONDS = 10.0
SMOKE = {
    "turns": 40,
    "threads": 2,
    "interval": 0.3,
    "poll_interval": 0.1,
    "heavy_poll_interval": 0.5,
    "stall_seconds": 60.0,
}
TIMELINE_SECONDS = 60.0
WARMUP_NUMBER = 10**9  # the warm-up exchange's word: never one of the measured ones


# --- The heavy tenant's import --------------------------------------------------------------------


def heavy_haystacks(path: Path, *, run_id: str, turns: int) -> list[Haystack]:
    """The haystacks in file order, sessions in order, until ``turns`` turns."""
    dataset = longmemeval_load(path, run_id=run_id, limit=None)
    chosen, total = [], 0
    for haystack in dataset.haystacks:
        kept = []
        for session in haystack.sessions:
            if total >= turns:
                break
            kept.append(session)
            total += len(session.messages)
        if kept:
            haystack.sessions = kept
            chosen.append(haystack)
        if total >= turns:
            break
    return chosen


@dataclass
class HeavyReport:
    users: int
    sessions: int
    turns: int
    add_seconds: float = math.nan
    processed_seconds: float = math.nan  # first add -> last turn no longer pending
    failed_messages: int = 0


# --- The light tenant -----------------------------------------------------------------------------


def _letters(number: int) -> str:
    """A number as lower-case letters (a word the text-search parser keeps whole)."""
    text = ""
    while True:
        number, digit = divmod(number, 26)
        text = chr(ord("a") + digit) + text
        if number == 0:
            return text


@dataclass
class Exchange:
    word: str
    message_ids: set[str]
    sent: float  # perf_counter just before the add
    add_ms: float
    searchable: float | None = None

    @property
    def seconds(self) -> float:
        return math.nan if self.searchable is None else self.searchable - self.sent


@dataclass
class Light:
    """The light tenant's conversation: adds on a clock, each polled until searchable."""

    client: KeepAliveClient
    user_id: str
    run_mark: str
    interval: float
    poll_interval: float
    exchanges: list[Exchange] = field(default_factory=list)
    searches: int = 0

    def add(self, number: int) -> Exchange:
        word = f"zq{self.run_mark}{_letters(number)}x"
        body = {
            "user_id": self.user_id,
            "session_id": f"{self.user_id}-chat",
            "messages": [
                {"role": "user", "content": f"Please remember the code word {word} for today."},
                {"role": "assistant", "content": "Noted, I will keep it in mind."},
            ],
        }
        sent = time.perf_counter()
        reply = self.client.exchange("POST", "/memory/add", json.dumps(body).encode())
        if reply.status == 429:
            raise BenchError(RATE_LIMIT_HINT)
        payload = reply.payload()
        if reply.status != 202 or not isinstance(payload, dict):
            raise BenchError(f"light POST /memory/add answered {reply.status} {payload}")
        return Exchange(word, set(payload["message_ids"]), sent, reply.elapsed_ms)

    def searchable(self, exchange: Exchange) -> bool:
        query = {
            "user_id": self.user_id,
            "query": exchange.word,
            "memory_type": "episodic",
            "search_method": "bm25",
            "limit": 5,
        }
        status, payload = self.client.request("GET", f"/memory/search?{urlencode(query)}")
        self.searches += 1
        if status == 429:
            raise BenchError(RATE_LIMIT_HINT)
        if status != 200 or not isinstance(payload, dict):
            raise BenchError(f"light GET /memory/search answered {status} {payload}")
        return any(
            exchange.message_ids & {str(value) for value in result.get("source_message_ids") or []}
            for result in payload["results"]
        )

    def run(self, *, stop: threading.Event, stall_seconds: float) -> None:
        """Adds on the clock until ``stop``, then polls until every exchange is searchable."""
        waiting: list[Exchange] = []
        next_add = time.perf_counter()
        stopped_at: float | None = None
        while True:
            now = time.perf_counter()
            if stop.is_set() and stopped_at is None:
                stopped_at = now
            if stopped_at is None and now >= next_add:
                exchange = self.add(len(self.exchanges))
                self.exchanges.append(exchange)
                waiting.append(exchange)
                next_add = max(next_add + self.interval, exchange.sent)
            while waiting and self.searchable(waiting[0]):
                waiting.pop(0).searchable = time.perf_counter()
            if stopped_at is not None and not waiting:
                return
            if stopped_at is not None and time.perf_counter() - stopped_at > stall_seconds:
                raise BenchError(
                    f"{len(waiting)} light exchanges still not searchable {stall_seconds:.0f} s "
                    "after the import was processed"
                )
            pause = self.poll_interval
            if stopped_at is None:
                pause = min(pause, next_add - time.perf_counter())
            time.sleep(max(0.0, pause))


# --- Reporting -----------------------------------------------------------------------------------


def _seconds(values: Sequence[float]) -> str:
    return (
        f"p50 {percentile(values, 0.50):6.2f} s   p95 {percentile(values, 0.95):6.2f} s   "
        f"max {max(values, default=math.nan):6.2f} s"
    )


def _report(*, heavy: HeavyReport, light: Light, began: float) -> None:
    latencies = [exchange.seconds for exchange in light.exchanges]
    adds_ms = [exchange.add_ms for exchange in light.exchanges]
    print("\nheavy tenant (the import):")
    print(f"  {heavy.users} users, {heavy.sessions} adds (one per session), {heavy.turns} turns")
    print(
        f"  adds: {heavy.add_seconds:.1f} s -> {heavy.sessions / heavy.add_seconds:.1f} adds/s, "
        f"{heavy.turns / heavy.add_seconds:.1f} turns/s accepted"
    )
    print(
        f"  first add to last turn processed: {heavy.processed_seconds:.1f} s -> "
        f"{heavy.turns / heavy.processed_seconds:.1f} turns/s"
        f"   (failed messages: {heavy.failed_messages})"
    )
    print(f"light tenant (one exchange every {light.interval:g} s, {len(latencies)} adds):")
    print(f"  add to searchable   {_seconds(latencies)}")
    print(
        f"  add request         p50 {percentile(adds_ms, 0.5):6.1f} ms  "
        f"p95 {percentile(adds_ms, 0.95):6.1f} ms   ({light.searches} searches polled)"
    )
    p95 = percentile(latencies, 0.95)
    print(
        f"  goal: add to searchable p95 <= {GOAL_P95_SECONDS:.0f} s: {p95:.2f} s  "
        f"{verdict(p95 <= GOAL_P95_SECONDS)}"
    )
    print("  by minute of the run (add sent):  adds   p50 s   p95 s   max s")
    minutes: dict[int, list[float]] = {}
    for exchange in light.exchanges:
        minutes.setdefault(int((exchange.sent - began) // TIMELINE_SECONDS), []).append(
            exchange.seconds
        )
    for minute, values in sorted(minutes.items()):
        print(
            f"    {minute:>3}-{minute + 1:<3} min {len(values):>20} {percentile(values, 0.5):7.2f} "
            f"{percentile(values, 0.95):7.2f} {max(values):7.2f}"
        )
    print(f"(searchable times are known to within one poll, every {light.poll_interval:g} s)")


def _organization_of(client: KeepAliveClient, name: str, user_id: str) -> str:
    """The organization of the key, by creating the bench user it will write for (the two
    keys must be two tenants)."""
    body = json.dumps({"user_id": user_id}).encode()
    status, payload = client.request("POST", "/users/create_or_get", body)
    if status == 401:
        raise BenchError(f"401: the {name} API key was refused ({payload})")
    if status == 429:
        raise BenchError(RATE_LIMIT_HINT)
    if status not in (200, 201) or not isinstance(payload, dict):
        raise BenchError(f"POST /users/create_or_get with the {name} key: {status} {payload}")
    return str(payload["organization_id"])


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    server_arguments(parser, key_help="the heavy tenant's key (default: the demo key)")
    parser.add_argument("--light-api-key", required=True, help="a key of another organization")
    parser.add_argument("--turns", type=int, default=20000, help="turns the heavy tenant imports")
    parser.add_argument("--threads", type=int, default=4, help="heavy users added at a time")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between light adds")
    parser.add_argument("--poll-interval", type=float, default=0.25, help="light search polls")
    parser.add_argument("--heavy-poll-interval", type=float, default=2.0, help="seconds")
    parser.add_argument(
        "--stall-seconds", type=float, default=600.0, help="give up when nothing moves this long"
    )
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--timeout", type=float, default=120.0, help="per request, seconds")
    return arguments_parse(parser, argv, smoke=SMOKE)


def _measure(
    *,
    arguments: argparse.Namespace,
    clients: Clients,
    haystacks: list[Haystack],
    heavy: HeavyReport,
    light: Light,
) -> float:
    """The import with the light tenant beside it; returns when the run began (perf_counter)."""
    heavy_organization = _organization_of(clients.get(), "heavy", haystacks[0].user_id)
    if heavy_organization == _organization_of(light.client, "light", light.user_id):
        raise BenchError("--api-key and --light-api-key belong to the same organization")
    warmup = light.add(WARMUP_NUMBER)
    while not light.searchable(warmup):
        if time.perf_counter() - warmup.sent > arguments.stall_seconds:
            raise BenchError("the warm-up add never became searchable: is a worker running?")
        time.sleep(arguments.poll_interval)
    print(f"warm-up: a light add searchable in {time.perf_counter() - warmup.sent:.1f} s")

    stop = threading.Event()
    failure: list[BaseException] = []

    def light_run() -> None:
        try:
            light.run(stop=stop, stall_seconds=arguments.stall_seconds)
        except BaseException as error:  # raised again by the main thread
            failure.append(error)

    thread = threading.Thread(target=light_run, name="light")
    began = time.perf_counter()
    thread.start()
    try:
        with ThreadPoolExecutor(arguments.threads) as pool:
            _provenance, heavy.add_seconds = _ingest(
                clients=clients, pool=pool, haystacks=haystacks
            )
            print(f"heavy adds done in {heavy.add_seconds:.1f} s; waiting for extraction")
            heavy.failed_messages = _wait_until_extracted(
                clients=clients,
                pool=pool,
                haystacks=haystacks,
                poll_interval=arguments.heavy_poll_interval,
                stall_seconds=arguments.stall_seconds,
            )
            heavy.processed_seconds = time.perf_counter() - began
    finally:
        stop.set()
        thread.join()
    if failure:
        raise failure[0]
    return began


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _arguments(argv)
    try:
        heavy_key = api_key_read(arguments)
    except BenchError as error:
        print(error, file=sys.stderr)
        return 1
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    run_id = f"fair-{stamp}"
    haystacks = heavy_haystacks(
        arguments.data_dir / LONGMEMEVAL_FILE, run_id=run_id, turns=arguments.turns
    )
    heavy = HeavyReport(
        users=len(haystacks),
        sessions=sum(len(haystack.sessions) for haystack in haystacks),
        turns=sum(haystack.message_count for haystack in haystacks),
    )
    clients = Clients(arguments.base_url, heavy_key, arguments.timeout)
    light = Light(
        client=KeepAliveClient(
            arguments.base_url, arguments.light_api_key, timeout=arguments.timeout
        ),
        user_id=f"{run_id}-light",
        run_mark=_letters(int(stamp.replace("-", ""))),
        interval=arguments.interval,
        poll_interval=arguments.poll_interval,
    )
    print(
        f"run {run_id} against {arguments.base_url}: heavy users {run_id}-lme-* "
        f"({heavy.users} users, {heavy.sessions} sessions, {heavy.turns} turns, "
        f"{arguments.threads} threads), light user {light.user_id}",
        flush=True,
    )
    try:
        began = _measure(
            arguments=arguments, clients=clients, haystacks=haystacks, heavy=heavy, light=light
        )
    except BenchError as error:
        print(error, file=sys.stderr)
        return 1
    except OSError as error:
        print(f"{arguments.base_url}: {error} (is the server running?)", file=sys.stderr)
        return 1
    _report(heavy=heavy, light=light, began=began)
    if arguments.smoke:
        print(SMOKE_NOTE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
