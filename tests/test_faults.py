"""Faults, on the real parts: a Celery worker process (prefork), the web server `make run` starts,
the embedded PostgreSQL and Redis of the test run. What the README promises: a worker killed in
the middle of a job loses nothing and stores nothing twice; adds made while Redis is down answer
at once and are all processed once it is back; while PostgreSQL restarts requests answer 503 in
the one error shape, and web and worker carry on afterwards without a restart.

Every test leaves PostgreSQL and Redis running whatever happens (other tests share them). The
recovery times they measure are listed at the end of the run and in bench/RESULTS.md."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memory.models import EpisodicMemory, ExtractionJob
from sessions.models import Message
from tests import processes
from tests.factories import TenantFixture, chat_turns, tenant_fixture
from tests.loopback import LoopbackServer, RecordedRequest, Reply, openai_reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

RecoveryTime = Callable[[str, float], None]


def wait_until(condition: Callable[[], bool], *, timeout: float, what: str) -> float:
    """Polls ``condition``; returns the monotonic time it first held."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)
    return time.monotonic()


def add(owner: TenantFixture, user_id: str, text: str) -> None:
    response = owner.api.post(
        "/memory/add", {"user_id": user_id, "messages": chat_turns(text, "Noted.")}, format="json"
    )
    assert response.status_code == 202, response.content


def nothing_pending() -> bool:
    return not Message.objects.exclude(extraction=Message.Extraction.PROCESSED).exists()


# --- A worker child killed with SIGKILL in the middle of a job ----------------------------------

_TURN = re.compile(r"^\[(\d+)\] \([^)]*\) [^:]+: (note .*)$", re.MULTILINE)


def _one_episode_per_note(request: RecordedRequest) -> dict[str, Any]:
    """What a model would answer: an event for each turn that is a note, citing it."""
    prompt = request.json["messages"][-1]["content"]
    episodes = [
        {"summary": text, "details": "", "actor": "user", "source_message_ids": [int(pk)]}
        for pk, text in _TURN.findall(prompt)
    ]
    empty: dict[str, list[Any]] = {
        kind: [] for kind in ("core", "semantic", "procedural", "resource", "knowledge_vault")
    }
    return {"episodic": episodes, **empty}


@pytest.fixture
def stalling_llm(loopback: LoopbackServer) -> Iterator[tuple[LoopbackServer, threading.Event]]:
    """An LLM whose first call never answers in time (the run a test kills); the others answer
    at once. Yields the server and an event set once that first call has arrived."""
    first_call, release = threading.Event(), threading.Event()

    def answer(request: RecordedRequest) -> Reply:
        if not first_call.is_set():
            first_call.set()
            release.wait(60)
        return Reply(200, openai_reply(_one_episode_per_note(request)))

    loopback.respond(answer)
    try:
        yield loopback, first_call
    finally:
        release.set()


def test_a_worker_child_killed_mid_job_loses_nothing_and_stores_nothing_twice(
    tmp_path: Path,
    stalling_llm: tuple[LoopbackServer, threading.Event],
    recovery_time: RecoveryTime,
) -> None:
    llm, first_call = stalling_llm
    alice = tenant_fixture("alice")
    llm_settings = {
        "LLM_PROVIDER": "openai",
        "LLM_MODEL": "loopback",
        "LLM_API_BASE": f"{llm.url}/v1",
        "LLM_API_KEY": "sk-loopback",
    }
    with processes.celery_worker(tmp_path, concurrency=1, **llm_settings) as worker:
        add(alice, "ann", "note ann 1")
        wait_until(first_call.is_set, timeout=60, what="the worker to call the LLM")
        [child] = worker.children()
        # The run is mid-job: its job claimed, its turns locked, its transaction open.
        [killed_job] = ExtractionJob.objects.filter(status=ExtractionJob.Status.RUNNING)
        # Queued behind the stalled run, for the children that come after it.
        for user in ("bob", "cyd"):
            add(alice, user, f"note {user} 1")

        os.kill(child, signal.SIGKILL)
        killed_at = time.monotonic()
        # Nothing but the delivery Celery sends again (the worker was lost) runs the killed job:
        # no other job of ann's exists, and no beat runs here.
        ann_stored = wait_until(
            lambda: EpisodicMemory.objects.filter(summary="note ann 1").exists(),
            timeout=60,
            what=f"the killed job's turn to be stored\n{worker.log_tail()}",
        )
        wait_until(nothing_pending, timeout=60, what=f"every turn\n{worker.log_tail()}")
        recovery_time("worker child SIGKILLed mid-job -> its turns stored", ann_stored - killed_at)
        assert worker.alive() and worker.children() not in ([], [child])

    summaries = Counter(EpisodicMemory.objects.values_list("end_user__user_id", "summary"))
    assert summaries == {
        ("ann", "note ann 1"): 1,
        ("bob", "note bob 1"): 1,
        ("cyd", "note cyd 1"): 1,
    }
    assert len(llm.requests) == 4  # ann's batch twice (the killed call, the re-run), bob's, cyd's
    killed_job.refresh_from_db()
    assert killed_job.status == ExtractionJob.Status.SUCCEEDED
    assert killed_job.attempts == 2 and killed_job.message_count == 2
    assert set(ExtractionJob.objects.values_list("status", flat=True)) == {"succeeded"}
    # The lost run counted as a failed attempt of the turns it held (turns that kill their
    # worker every time are given up in the end), and of no others.
    attempts = set(Message.objects.values_list("end_user__user_id", "extraction_attempts"))
    assert attempts == {("ann", 1), ("bob", 0), ("cyd", 0)}
