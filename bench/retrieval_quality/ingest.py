"""The retrieval-quality bench's ingest: each haystack sent through ``POST /memory/add`` in
any client pattern, the wait until the worker has extracted every turn, and the provenance
that maps each stored message back to its benchmark turn (read back from the server with
``--skip-ingest``); also the per-thread clients and the thread pool's helper that the searches
use too. See steps 1 and 2 of ``__main__``'s docstring."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

from bench.common import (
    DROPPED,
    PROGRESS_EVERY_SECONDS,
    RATE_LIMIT_HINT,
    BenchError,
    KeepAliveClient,
)
from bench.retrieval_quality.datasets import Haystack, SessionPlan

Item = TypeVar("Item")
Outcome = TypeVar("Outcome")


# --- Talking to the server -----------------------------------------------------------------------


class Clients:
    """One keep-alive client per thread (a longer timeout than the default: long haystack adds,
    searches under load)."""

    def __init__(self, base_url: str, api_key: str, timeout: float) -> None:
        self.base_url, self.api_key, self.timeout = base_url, api_key, timeout
        self.local = threading.local()

    def get(self) -> KeepAliveClient:
        client = getattr(self.local, "client", None)
        if client is None:
            client = self.local.client = KeepAliveClient(
                self.base_url, self.api_key, timeout=self.timeout
            )
        return client


def _session_messages(
    client: KeepAliveClient, user_id: str, session_id: str
) -> list[dict[str, Any]]:
    """All messages of a session, oldest first; [] when the session does not exist."""
    messages: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        query = {"user_id": user_id, "limit": 1000} | ({"cursor": cursor} if cursor else {})
        path = f"/sessions/{quote(session_id)}/messages?{urlencode(query)}"
        status, payload = client.request("GET", path)
        if status == 404:
            return []
        if status != 200 or not isinstance(payload, dict):
            raise BenchError(f"GET {path}: {status} {payload}")
        messages.extend(payload["results"])
        cursor = payload.get("next_cursor")
        if not cursor:
            return messages


def _default_conversation_turns(client: KeepAliveClient, user_id: str) -> int:
    """How many turns the user's default conversations (sessions with no session_id) hold; 0
    for a user the server does not know."""
    total, cursor = 0, None
    while True:
        query = {"user_id": user_id, "limit": 1000} | ({"cursor": cursor} if cursor else {})
        path = f"/sessions?{urlencode(query)}"
        status, payload = client.request("GET", path)
        if status == 404:
            return 0
        if status != 200 or not isinstance(payload, dict):
            raise BenchError(f"GET {path}: {status} {payload}")
        total += sum(
            int(session["message_count"])
            for session in payload["results"]
            if session.get("session_id") is None
        )
        cursor = payload.get("next_cursor")
        if not cursor:
            return total


def _added_ids(status: int, payload: object, *, count: int, where: str) -> list[str]:
    """The stored messages' ids an add answered, in the order sent."""
    if status == 429:
        raise BenchError(RATE_LIMIT_HINT)
    if status != 202 or not isinstance(payload, dict):
        raise BenchError(f"POST /memory/add ({where}): {status} {payload}")
    ids = [str(value) for value in payload.get("message_ids") or []]
    if len(ids) != count:
        raise BenchError(
            f"POST /memory/add answered {len(ids)} message_ids for {count} messages ({where})"
        )
    return ids


def _add_session(client: KeepAliveClient, user_id: str, session: SessionPlan) -> list[str]:
    """The session pattern: one add; the stored messages' ids, in the order sent."""
    body: dict[str, Any] = {
        "user_id": user_id,
        "session_id": session.session_id,
        "messages": session.messages,
    }
    if session.occurred_at:
        body["occurred_at"] = session.occurred_at
    where = f"{user_id}/{session.session_id}"
    try:
        status, payload = client.request("POST", "/memory/add", json.dumps(body).encode())
    except DROPPED:
        # The connection dropped under the add: whether it was stored decides what to do, as
        # sending it again would append the turns a second time.
        client.close()
        stored = _session_messages(client, user_id, session.session_id)
        if len(stored) == len(session.messages):
            return [str(message["id"]) for message in stored]
        if stored:
            raise BenchError(f"{where}: partly stored after a drop") from None
        status, payload = client.request("POST", "/memory/add", json.dumps(body).encode())
    return _added_ids(status, payload, count=len(session.messages), where=where)


def _turn_adds(user_id: str, session: SessionPlan, *, turn_ids: bool) -> list[dict[str, Any]]:
    """The turns pattern's adds for one haystack session, one per turn, as the published MIRIX
    client sends a conversation: no session_id (the server files them in the user's default
    conversation), role ``user``, the speaker named in the text (``"<speaker>: <text>"``); the
    haystack session's date, and a tag naming the session the session pattern would add. With
    ``turn_ids`` (the turn-ids pattern) the tags also carry the turn's own id, its LoCoMo dia_id
    or LongMemEval ``<session id>#<index>``, as ``message_id``: a client keeping its message
    ids as tags."""
    dated = {"occurred_at": session.occurred_at} if session.occurred_at else {}
    return [
        {
            "user_id": user_id,
            "messages": [{"role": "user", "content": f"{speaker}: {message['content']}"}],
            "filter_tags": {"session": session.session_id}
            | ({"message_id": key} if turn_ids else {}),
        }
        | dated
        for message, speaker, key in zip(
            session.messages, session.speakers, session.turn_keys, strict=True
        )
    ]


def _add_turn(client: KeepAliveClient, body: dict[str, Any], *, stored_before: int) -> str:
    """The turns pattern: one add of one turn, after ``stored_before`` of the user's; the stored
    message's id."""
    user_id, data = body["user_id"], json.dumps(body).encode()
    try:
        status, payload = client.request("POST", "/memory/add", data)
    except DROPPED:
        # As in _add_session, except that the default conversation's turns cannot be read
        # back: its count tells whether the turn was stored, but not under which id.
        client.close()
        stored = _default_conversation_turns(client, user_id)
        if stored != stored_before:
            raise BenchError(
                f"{user_id}: {stored} turns stored after a dropped add, {stored_before} before "
                "it: a stored turn's id cannot be read back from the default conversation"
            ) from None
        status, payload = client.request("POST", "/memory/add", data)
    return _added_ids(status, payload, count=1, where=f"{user_id}, turn {stored_before + 1}")[0]


def _memories(client: KeepAliveClient, user_id: str) -> dict[str, Any]:
    """Every memory of the user, of every type (``GET /memory/components``)."""
    query = urlencode({"user_id": user_id, "memory_type": "all", "limit": 0})
    status, payload = client.request("GET", f"/memory/components?{query}")
    if status != 200 or not isinstance(payload, dict):
        raise BenchError(f"GET /memory/components for {user_id}: {status} {payload}")
    return payload


def _cited_ids(payload: dict[str, Any], kind: str | None = None) -> set[str]:
    """The message ids the memories of ``_memories`` cite (only those of ``kind``, if named)."""
    return {
        str(value)
        for name, group in payload["memories"].items()
        if (kind is None and name != "knowledge") or name == kind
        for memory in group["items"]
        for value in memory.get("source_message_ids") or []
    }


def _search_available(client: KeepAliveClient) -> bool:
    """False when the server's OpenAPI schema has no ``/memory/search`` (not built yet)."""
    status, payload = client.request("GET", "/api/schema/?format=json")
    if status != 200 or not isinstance(payload, dict) or "paths" not in payload:
        return True  # no schema to go by: let the searches tell
    return "/memory/search" in payload["paths"]


def _in_parallel(
    pool: ThreadPoolExecutor,
    function: Callable[[Item], Outcome],
    items: Sequence[Item],
    progress: Callable[[int], str] | None = None,
) -> list[Outcome]:
    """``function`` over ``items`` on the pool, results in order; the first error is raised."""
    futures: list[Future[Outcome]] = [pool.submit(function, item) for item in items]
    pending = set(futures)
    while pending:
        _done, pending = wait(pending, timeout=PROGRESS_EVERY_SECONDS)
        if progress is not None and pending:
            print(progress(len(futures) - len(pending)), flush=True)
    return [future.result() for future in futures]


# --- Ingest and wait for extraction --------------------------------------------------------------


@dataclass
class TurnRef:
    """What a stored message is in the benchmark: its unit, its turn, its place in the user's
    haystack."""

    unit: str
    turn_key: str
    order: int


Provenance = dict[str, dict[str, TurnRef]]  # user_id -> message id -> turn


@dataclass
class IngestReport:
    """What went in, how long it took to become searchable, and what the worker made of it."""

    users: int
    sessions: int
    messages: int
    adds: int
    add_seconds: float | None = None
    searchable_seconds: float | None = None
    failed_messages: int = 0
    turns_cited_by_episodic: int = 0
    turns_cited_by_any: int = 0
    memory_counts: dict[str, int] = field(default_factory=dict)


def _adds_of(haystack: Haystack, client_pattern: str) -> int:
    return len(haystack.sessions) if client_pattern == "session" else haystack.message_count


def _provenance_of(haystack: Haystack, ids_per_session: list[list[str]]) -> dict[str, TurnRef]:
    refs: dict[str, TurnRef] = {}
    order = 0
    for session, ids in zip(haystack.sessions, ids_per_session, strict=True):
        for message_id, unit, key in zip(ids, session.units, session.turn_keys, strict=True):
            refs[message_id] = TurnRef(unit=unit, turn_key=key, order=order)
            order += 1
    return refs


def _ingest(
    *,
    clients: Clients,
    pool: ThreadPoolExecutor,
    haystacks: list[Haystack],
    client_pattern: str = "session",
) -> tuple[Provenance, float]:
    total = sum(_adds_of(haystack, client_pattern) for haystack in haystacks)
    sent = [0]
    lock = threading.Lock()

    def added() -> None:
        with lock:
            sent[0] += 1

    def one_user(haystack: Haystack) -> dict[str, TurnRef]:
        client = clients.get()
        ids_per_session: list[list[str]] = []
        for session in haystack.sessions:
            if client_pattern == "session":
                ids = _add_session(client, haystack.user_id, session)
                added()
            else:
                earlier = sum(len(session_ids) for session_ids in ids_per_session)
                ids = []
                turn_ids = client_pattern == "turn-ids"
                for body in _turn_adds(haystack.user_id, session, turn_ids=turn_ids):
                    ids.append(_add_turn(client, body, stored_before=earlier + len(ids)))
                    added()
            ids_per_session.append(ids)
        return _provenance_of(haystack, ids_per_session)

    began = time.perf_counter()
    refs = _in_parallel(
        pool, one_user, haystacks, lambda _users: f"  {sent[0]} of {total} adds sent"
    )
    seconds = time.perf_counter() - began
    return {h.user_id: r for h, r in zip(haystacks, refs, strict=True)}, seconds


_SAME_RUN = (
    "was this run ingested with the same --dataset, --split, --client-pattern, "
    "--limit-questions and --smoke?"
)


def _provenance_read(
    *, clients: Clients, pool: ThreadPoolExecutor, haystacks: list[Haystack]
) -> Provenance:
    """--skip-ingest, session pattern: a session is one add, so its messages in position order
    are its turns."""

    def one_user(haystack: Haystack) -> dict[str, TurnRef]:
        client = clients.get()
        ids_per_session = []
        for session in haystack.sessions:
            stored = _session_messages(client, haystack.user_id, session.session_id)
            if len(stored) != len(session.messages):
                raise BenchError(
                    f"{haystack.user_id}/{session.session_id}: {len(stored)} messages stored, "
                    f"{len(session.messages)} expected: {_SAME_RUN}"
                )
            ids_per_session.append([str(message["id"]) for message in stored])
        return _provenance_of(haystack, ids_per_session)

    refs = _in_parallel(pool, one_user, haystacks)
    return {h.user_id: r for h, r in zip(haystacks, refs, strict=True)}


def _turns_provenance_read(
    *, clients: Clients, pool: ThreadPoolExecutor, haystacks: list[Haystack]
) -> Provenance:
    """--skip-ingest, turns pattern, once extracted: the default conversation's turns cannot
    be listed (see _TurnsSweeper), but each is cited by some memory, and a user's turns were
    added one at a time, in order, so the server numbered them in that order: the cited ids in
    numeric order are the haystack's turns. Refused when the count is not exactly that."""

    def one_user(haystack: Haystack) -> dict[str, TurnRef]:
        cited = _cited_ids(_memories(clients.get(), haystack.user_id))
        if len(cited) != haystack.message_count or not all(value.isdigit() for value in cited):
            raise BenchError(
                f"{haystack.user_id}: its memories cite {len(cited)} messages, "
                f"{haystack.message_count} turns expected: the turns pattern's ids are read "
                "back from the memories citing them, which needs one per turn, numbered"
            )
        ordered = iter(sorted(cited, key=int))
        return _provenance_of(
            haystack,
            [[next(ordered) for _message in session.messages] for session in haystack.sessions],
        )

    refs = _in_parallel(pool, one_user, haystacks)
    return {h.user_id: r for h, r in zip(haystacks, refs, strict=True)}


class _SessionSweeper:
    """The session pattern's progress: a user's sessions are read back in order, stopping at
    the first with a turn still ``pending`` (the worker takes a user's oldest turns first), and
    a session once done is not read again. One thread sweeps a user at a time."""

    stalled = "is the Celery worker running? Look at the extraction jobs in the admin."

    def __init__(self, haystacks: list[Haystack]) -> None:
        self.remaining = {haystack.user_id: list(haystack.sessions) for haystack in haystacks}
        self.processed = {haystack.user_id: 0 for haystack in haystacks}
        self.failed = {haystack.user_id: 0 for haystack in haystacks}

    def waiting(self) -> list[str]:
        return [user_id for user_id, left in self.remaining.items() if left]

    def sweep(self, client: KeepAliveClient, user_id: str) -> None:
        sessions = self.remaining[user_id]
        while sessions:
            stored = _session_messages(client, user_id, sessions[0].session_id)
            if not stored or any(message["extraction"] == "pending" for message in stored):
                return
            self.processed[user_id] += len(stored)
            self.failed[user_id] += sum(1 for m in stored if m["extraction"] == "failed")
            sessions.pop(0)


class _TurnsSweeper:
    """The turns pattern's progress. Its turns are in the user's default conversation, whose
    messages and their extraction state the API cannot read: ``GET /sessions/{id}/messages``
    names a session by the caller's session_id, and that one has none (``GET /sessions`` lists
    it, with its count). So a turn counts as processed once some memory cites it, which the
    deterministic extractor does for every turn (each is in one exchange's episode); a failed
    turn is never cited, and shows as a stall. Each user's stored count is checked first."""

    stalled = (
        "in the turns pattern a turn is seen as processed once a memory cites it (the API "
        "shows no extraction state for the default conversation): is the Celery worker "
        "running, or does the server's extractor leave turns uncited?"
    )

    def __init__(self, haystacks: list[Haystack]) -> None:
        self.expected = {haystack.user_id: haystack.message_count for haystack in haystacks}
        self.processed = {haystack.user_id: 0 for haystack in haystacks}
        self.failed: dict[str, int] = {}
        self.checked: set[str] = set()

    def waiting(self) -> list[str]:
        return [
            user_id for user_id, count in self.expected.items() if self.processed[user_id] < count
        ]

    def sweep(self, client: KeepAliveClient, user_id: str) -> None:
        if user_id not in self.checked:
            stored = _default_conversation_turns(client, user_id)
            if stored != self.expected[user_id]:
                raise BenchError(
                    f"{user_id}: {stored} turns in its default conversation, "
                    f"{self.expected[user_id]} expected: {_SAME_RUN}"
                )
            self.checked.add(user_id)
        self.processed[user_id] = len(_cited_ids(_memories(client, user_id)))


def _wait_until_extracted(
    *,
    clients: Clients,
    pool: ThreadPoolExecutor,
    haystacks: list[Haystack],
    poll_interval: float,
    stall_seconds: float,
    client_pattern: str = "session",
) -> int:
    """Sweeps until every turn of every bench user is processed (_SessionSweeper,
    _TurnsSweeper); the number of ``failed`` messages."""
    sweeper = (_SessionSweeper if client_pattern == "session" else _TurnsSweeper)(haystacks)
    total = sum(haystack.message_count for haystack in haystacks)

    def sweep(user_id: str) -> None:
        sweeper.sweep(clients.get(), user_id)

    began = last_change = next_report = time.perf_counter()
    last_done = -1
    while waiting := sweeper.waiting():
        sweep_began = time.perf_counter()
        _in_parallel(pool, sweep, waiting)
        now, done = time.perf_counter(), sum(sweeper.processed.values())
        if done != last_done:
            last_change, last_done = now, done
        elif now - last_change > stall_seconds:
            raise BenchError(
                f"no message processed for {stall_seconds:.0f} s ({done} of {total}): "
                + sweeper.stalled
            )
        if now >= next_report and sweeper.waiting():
            print(f"  {now - began:7.1f} s  {done} of {total} messages processed", flush=True)
            next_report = now + PROGRESS_EVERY_SECONDS
        if sweeper.waiting():
            time.sleep(max(0.0, poll_interval - (time.perf_counter() - sweep_began)))
    return sum(sweeper.failed.values())


def _coverage(
    *, clients: Clients, pool: ThreadPoolExecutor, provenance: Provenance, report: IngestReport
) -> None:
    """How many turns some memory cites, and how many memories of each type there are."""

    def one_user(user_id: str) -> tuple[set[str], set[str], dict[str, int]]:
        payload = _memories(clients.get(), user_id)
        counts = {kind: int(count) for kind, count in payload["counts"].items()}
        return _cited_ids(payload, "episodic"), _cited_ids(payload), counts

    for user_id, (episodic, cited, counts) in zip(
        provenance, _in_parallel(pool, one_user, list(provenance)), strict=True
    ):
        turns = provenance[user_id].keys()
        report.turns_cited_by_episodic += len(turns & episodic)
        report.turns_cited_by_any += len(turns & cited)
        for kind, count in counts.items():
            report.memory_counts[kind] = report.memory_counts.get(kind, 0) + count
