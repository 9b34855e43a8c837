"""What the skill benches (``bench.skill_learning``, ``bench.skill_families``,
``bench.task_families``) share: a task session as an agent sends it (its turns, the tool calls in
them, the tools it declares), the sessions sent through the API as one add and one close each, the
wait for the learning runs that take them, and the BM25 baseline computed in the bench's process."""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from bench.common import (
    PROGRESS_EVERY_SECONDS,
    RATE_LIMIT_HINT,
    BenchError,
    KeepAliveClient,
    reference_tokens,
)

RETRIEVE_LIMIT = 5
BM25_K1, BM25_B = 1.2, 0.75
BM25_RULE = (
    f"Okapi BM25 (k1 {BM25_K1}, b {BM25_B}, idf ln(1 + (N - df + 0.5) / (df + 0.5))), lower "
    "case, tokens runs of letters/digits, NLTK English stop words dropped"
)
RUN_ACTIVE = ("queued", "running")


# --- Task sessions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionPlan:
    session_id: str
    tool: str
    request: str
    wrong_tool: str | None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]  # the definitions of the tools it calls, as an agent declares them


def tool_turns(
    tool: str, arguments: dict[str, Any], result: str, call_id: str
) -> list[dict[str, Any]]:
    """One tool call of the assistant and the tool's result, as an agent sends them."""
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": tool, "arguments": json.dumps(arguments)},
    }
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": tool, "tool_call_id": call_id, "content": result},
    ]


def tool_definition(name: str, description: str) -> dict[str, Any]:
    """A tool as an agent declares it to its model (OpenAI's shape), the request its one
    argument."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }


# --- Through the API -----------------------------------------------------------------------------


def answer_check(status: int, payload: object, expected: int, where: str) -> Any:
    if status == 429:
        raise BenchError(RATE_LIMIT_HINT)
    if status != expected:
        raise BenchError(f"{where} answered {status} {payload}")
    return payload


def _pages(client: KeepAliveClient, path: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Every row of a paginated list, following ``next_cursor``."""
    rows: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = params | {"limit": 1000} | ({"cursor": cursor} if cursor else {})
        payload = answer_check(
            *client.request("GET", f"{path}?{urlencode(query)}"), 200, f"GET {path}"
        )
        rows += payload["results"]
        cursor = payload.get("next_cursor")
        if not cursor:
            return rows


@dataclass
class RunsSeen:
    """The user's learning runs at one poll."""

    runs: list[dict[str, Any]]
    states: dict[str, int]
    taken: int  # sessions of the bench's in a run
    learned: int  # of them, in a run that succeeded
    active: bool  # a run is queued or running


def runs_read(client: KeepAliveClient, user_id: str, session_ids: set[str]) -> RunsSeen:
    """The runs; raises when one ended other than succeeded."""
    runs = _pages(client, "/learning-runs", {"user_id": user_id})
    states: dict[str, int] = {}
    for run in runs:
        states[run["state"]] = states.get(run["state"], 0) + 1
    stopped = [run for run in runs if run["state"] not in (*RUN_ACTIVE, "succeeded")]
    if stopped:
        details = "; ".join(f"run {run['id']} {run['state']}: {run['error']}" for run in stopped)
        raise BenchError(f"learning runs did not succeed: {details}")
    return RunsSeen(
        runs=runs,
        states=states,
        taken=len({sid for run in runs for sid in run["session_ids"]} & session_ids),
        learned=sum(
            len(set(run["session_ids"]) & session_ids)
            for run in runs
            if run["state"] == "succeeded"
        ),
        active=any(run["state"] in RUN_ACTIVE for run in runs),
    )


def runs_waiter(
    client: KeepAliveClient,
    user_id: str,
    session_ids: set[str],
    *,
    began: float,
    poll_interval: float,
    stall_seconds: float,
) -> Callable[[Callable[[RunsSeen], bool]], RunsSeen]:
    """``runs_wait`` for these sessions, given only the condition."""

    def wait(until: Callable[[RunsSeen], bool]) -> RunsSeen:
        return runs_wait(
            client,
            user_id,
            session_ids,
            until=until,
            began=began,
            poll_interval=poll_interval,
            stall_seconds=stall_seconds,
        )

    return wait


def runs_wait(
    client: KeepAliveClient,
    user_id: str,
    session_ids: set[str],
    *,
    until: Callable[[RunsSeen], bool],
    began: float,
    poll_interval: float,
    stall_seconds: float,
) -> RunsSeen:
    """Poll the runs until ``until`` holds; raises when no session is learned for
    ``stall_seconds``."""
    last_progress, last_note, learned_before = time.monotonic(), time.monotonic(), -1
    while True:
        seen = runs_read(client, user_id, session_ids)
        if until(seen):
            return seen
        now = time.monotonic()
        if seen.learned != learned_before:
            learned_before, last_progress = seen.learned, now
        elif now - last_progress > stall_seconds:
            raise BenchError(
                f"learning stalled: {seen.learned} of {len(session_ids)} sessions learned, "
                f"{seen.taken} in a run, runs {seen.states}, nothing moved for "
                f"{stall_seconds:.0f} s (is a worker consuming the learning queue?)"
            )
        if now - last_note > PROGRESS_EVERY_SECONDS:
            last_note = now
            print(f"  {now - began:7.1f} s  {seen.learned:,} sessions learned, runs {seen.states}")
        time.sleep(poll_interval)


@dataclass
class Sent:
    seconds: float
    add_statuses: dict[int, int]
    close_statuses: dict[int, int]
    requested_run: str  # what POST /learning-runs did for the sessions left over
    paused_seconds: float  # waiting for the runs to catch up (--max-pending)


def sessions_send(
    client: KeepAliveClient,
    user_id: str,
    plans: Sequence[SessionPlan],
    *,
    max_pending: int | None,
    wait: Callable[[Callable[[RunsSeen], bool]], RunsSeen],
) -> Sent:
    """Each session as one add and one close, in order; with ``max_pending``, pausing while
    that many sent sessions are not learned yet; then a run for those left over."""
    began = last_note = time.monotonic()
    paused = 0.0
    learned = 0  # as last seen: the runs are read only when it may be too few
    adds: dict[int, int] = {}
    closes: dict[int, int] = {}
    for number, plan in enumerate(plans, 1):
        body = {
            "user_id": user_id,
            "session_id": plan.session_id,
            "session_tag": "task",
            "messages": plan.messages,
            **({"tools": plan.tools} if plan.tools else {}),
        }
        status, payload = client.request("POST", "/memory/add", json.dumps(body).encode())
        adds[status] = adds.get(status, 0) + 1
        answer_check(status, payload, 202, f"POST /memory/add ({plan.session_id})")
        path = f"/sessions/{quote(plan.session_id)}/close"
        status, payload = client.request("POST", path, json.dumps({"user_id": user_id}).encode())
        closes[status] = closes.get(status, 0) + 1
        answer_check(status, payload, 200, f"POST {path}")
        if max_pending is not None and number < len(plans) and number - learned >= max_pending:
            pause_began = time.monotonic()
            learned = wait(lambda seen, sent=number: sent - seen.learned < max_pending).learned
            paused += time.monotonic() - pause_began
        if time.monotonic() - last_note > PROGRESS_EVERY_SECONDS:
            last_note = time.monotonic()
            print(f"  {last_note - began:7.1f} s  {number:,} of {len(plans):,} sessions sent")
    seconds = time.monotonic() - began
    body = json.dumps({"user_id": user_id}).encode()
    status, payload = client.request("POST", "/learning-runs", body)
    if status == 409:
        requested = "none left over"
    elif status == 201:
        requested = f"run {payload['id']} queued for the {len(payload['session_ids'])} left over"
    else:
        run = answer_check(status, payload, 200, "POST /learning-runs")
        requested = f"run {run['id']} already queued, holding {len(run['session_ids'])}"
    return Sent(seconds, adds, closes, requested, paused)


# --- The BM25 baseline, in this process ----------------------------------------------------------


class Bm25:
    """Okapi BM25 (BM25_RULE) over one document per tool; each distinct query term once."""

    def __init__(self, documents: dict[str, str]) -> None:
        self.tools = list(documents)
        self.postings: dict[str, list[tuple[int, int]]] = {}
        self.lengths: list[int] = []
        for index, text in enumerate(documents.values()):
            counts: dict[str, int] = {}
            for token in reference_tokens(text):
                counts[token] = counts.get(token, 0) + 1
            for term, count in counts.items():
                self.postings.setdefault(term, []).append((index, count))
            self.lengths.append(sum(counts.values()))
        self.average_length = statistics.fmean(self.lengths) or 1.0

    def ranked(self, query: str) -> list[str]:
        scores = [0.0] * len(self.tools)
        total = len(self.tools)
        for term in set(reference_tokens(query)):
            postings = self.postings.get(term, [])
            idf = math.log(1 + (total - len(postings) + 0.5) / (len(postings) + 0.5))
            for index, tf in postings:
                norm = 1 - BM25_B + BM25_B * self.lengths[index] / self.average_length
                scores[index] += idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * norm)
        order = sorted(range(total), key=lambda index: (-scores[index], index))
        return [self.tools[index] for index in order]
