"""Faults, on the real parts: a Celery worker process (prefork), the web server `make run` starts,
the embedded PostgreSQL and Redis of the test run. What the README promises: a worker killed in
the middle of a job loses nothing and stores nothing twice; adds made while Redis is down answer
at once and are all processed once it is back; while PostgreSQL restarts requests answer 503 in
the one error shape, and web and worker carry on afterwards without a restart.

Every test leaves PostgreSQL and Redis running whatever happens (other tests share them). The
recovery times they measure are listed at the end of the run and in bench/RESULTS.md."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import requests
from django.db import connections

from bench.faults import Load
from memory.models import EpisodicMemory, ExtractionJob
from memory.services import extraction_jobs_recover
from mirix_site import launcher
from mirix_site.search.lanes import lanes_close
from sessions.models import Message
from tests import processes
from tests.factories import TenantFixture, chat_turns, tenant_fixture
from tests.loopback import LoopbackServer, StallingLLM
from tests.processes import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

RecoveryTime = Callable[[str, float], None]
# How long PostgreSQL and Redis stay down: a few seconds, as a restart of either takes.
OUTAGE_SECONDS = 3.0


def add(owner: TenantFixture, user_id: str, text: str) -> None:
    response = owner.api.post(
        "/memory/add", {"user_id": user_id, "messages": chat_turns(text, "Noted.")}, format="json"
    )
    assert response.status_code == 202, response.content


def nothing_pending() -> bool:
    return not Message.objects.exclude(extraction=Message.Extraction.PROCESSED).exists()


@pytest.fixture
def llm(loopback: LoopbackServer) -> Iterator[StallingLLM]:
    stalling = StallingLLM(loopback)
    try:
        yield stalling
    finally:
        stalling.release()


# --- A worker child killed with SIGKILL in the middle of a job -----------------------------------


def test_a_worker_child_killed_mid_job_loses_nothing_and_stores_nothing_twice(
    tmp_path: Path, llm: StallingLLM, recovery_time: RecoveryTime
) -> None:
    alice = tenant_fixture("alice")
    with processes.celery_worker(tmp_path, concurrency=1, **llm.environment) as worker:
        llm.stall()
        add(alice, "ann", "note ann 1")
        wait_until(llm.stalled.is_set, timeout=60, what="the worker to call the LLM")
        [child] = worker.children()
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
    # ann's batch twice (the killed call, the re-run), bob's, cyd's.
    assert len(llm.server.requests) == 4
    killed_job.refresh_from_db()
    assert killed_job.status == ExtractionJob.Status.SUCCEEDED
    assert killed_job.attempts == 2 and killed_job.message_count == 2
    assert set(ExtractionJob.objects.values_list("status", flat=True)) == {"succeeded"}
    # The lost run counted as a failed attempt of the turns it held (turns that kill their
    # worker every time are given up in the end), and of no others.
    attempts = set(Message.objects.values_list("end_user__user_id", "extraction_attempts"))
    assert attempts == {("ann", 1), ("bob", 0), ("cyd", 0)}


# --- PostgreSQL restarted under load -------------------------------------------------------------


def test_postgres_restarted_under_load_answers_503_then_web_and_worker_carry_on(
    tmp_path: Path, llm: StallingLLM, recovery_time: RecoveryTime
) -> None:
    keys = [tenant_fixture(name).key for name in ("alice", "bob", "carol")]
    pg_dir = launcher.data_dir() / "pg"
    with (
        processes.celery_worker(tmp_path, **llm.environment) as worker,
        processes.web_server(tmp_path, workers=2) as web,
    ):
        load = Load(web.url, keys, user_id="sam", prefix="load")
        load.start()
        try:
            began = time.monotonic()
            # Warm: both web workers answering, the worker has stored memories (model loaded).
            wait_until(
                lambda: (
                    len(load.answered(after=began, ok=True)) >= 10
                    and EpisodicMemory.objects.exists()
                ),
                timeout=90,
                what="the load to get going",
            )
            # A job held mid-run when the server goes, and jobs queued behind it: the worker
            # runs into the outage for certain.
            llm.stall()
            wait_until(llm.stalled.is_set, timeout=30, what="a job held mid-run")
            [held] = ExtractionJob.objects.filter(status=ExtractionJob.Status.RUNNING)
            try:
                stopping = time.monotonic()
                launcher.postgres_stop(pg_dir)
                stopped = time.monotonic()
                llm.release()
                wait_until(
                    lambda: (
                        time.monotonic() > stopped + OUTAGE_SECONDS
                        and {a.kind for a in load.answered(after=stopped, status=503)}
                        == {"add", "search"}
                    ),
                    timeout=30,
                    what="503s to adds and searches",
                )
            finally:
                llm.release()
                starting = time.monotonic()
                launcher.postgres_ensure(pg_dir)
                # This process's own connections died with the server too.
                connections.close_all()
                lanes_close()
            back = time.monotonic()
            web_back = wait_until(
                lambda: load.answered(after=back, ok=True),
                timeout=30,
                what="a 2xx after the restart",
            )
            wait_until(
                lambda: len(load.answered(after=back, ok=True)) >= 6, timeout=30, what="more 2xx"
            )
        finally:
            load.stop()

        first_add_after = next(a for a in load.answered(after=back, status=202))
        worker_back = wait_until(
            lambda: EpisodicMemory.objects.filter(summary=first_add_after.text).exists(),
            timeout=60,
            what=f"the worker to store a turn added after the restart\n{worker.log_tail()}",
        )
        wait_until(nothing_pending, timeout=90, what=f"every turn\n{worker.log_tail()}")
        # The held job's own retry may come after its turns are stored (the user's next job
        # took them): the database backoff is 2 s doubling per failed try, 8-16 s after an
        # outage of four seconds.
        wait_until(
            lambda: ExtractionJob.objects.filter(
                pk=held.pk,
                status__in=[ExtractionJob.Status.SUCCEEDED, ExtractionJob.Status.FAILED],
            ).exists(),
            timeout=60,
            what=f"the held job's retry\n{worker.log_tail()}",
        )
        recovery_time("PostgreSQL back -> first 2xx from the web server", web_back - back)
        recovery_time("PostgreSQL back -> the worker stores a new turn", worker_back - back)
        recovery_time("PostgreSQL outage (stop called -> started)", back - stopping)
        assert worker.alive() and web.alive()  # neither restarted

    statuses = Counter(answer.status for answer in load.answers)
    assert set(statuses) <= {200, 202, 503}, statuses
    for answer in load.answered(after=0, status=503):
        assert answer.body == {
            "detail": "The database is unavailable; try again shortly.",
            "code": "unavailable",
        }
        assert answer.retry_after == "2"
    # Down was answered as down: nothing sent while the server was stopped succeeded.
    assert not [a for a in load.answered(after=stopped, ok=True) if a.sent < starting]
    # Every add that was accepted was stored and extracted, once.
    accepted = Counter(answer.text for answer in load.answers if answer.status == 202)
    stored = Counter(
        EpisodicMemory.objects.filter(summary__startswith="note load").values_list(
            "summary", flat=True
        )
    )
    assert stored == accepted
    # No job is left behind; the held one ran again, or its user's next job took its turns.
    held.refresh_from_db()
    assert held.status == ExtractionJob.Status.SUCCEEDED or (
        "retried by the user's next queued job" in held.error
    )
    assert set(ExtractionJob.objects.values_list("status", flat=True)) <= {"succeeded", "failed"}
    for job in ExtractionJob.objects.filter(status=ExtractionJob.Status.FAILED):
        assert "retried by the user's next queued job" in job.error


# --- Redis stopped while adds arrive -------------------------------------------------------------


def test_adds_while_redis_is_down_answer_at_once_and_are_all_processed_once_it_is_back(
    tmp_path: Path, recovery_time: RecoveryTime
) -> None:
    alice, bob = tenant_fixture("alice"), tenant_fixture("bob")
    redis_dir = launcher.data_dir() / "redis"
    with processes.celery_worker(tmp_path) as worker, processes.web_server(tmp_path) as web:
        session = requests.Session()

        def add_over_http(owner: TenantFixture, user_id: str, text: str) -> float:
            began = time.monotonic()
            response = session.post(
                f"{web.url}/memory/add",
                json={"user_id": user_id, "messages": chat_turns(text, "Noted.")},
                headers={"X-API-Key": owner.key},
                timeout=30,
            )
            assert response.status_code == 202, response.text
            return time.monotonic() - began

        # Warm: the worker has loaded its embedding model.
        add_over_http(alice, "ann", "note ann 0")
        wait_until(nothing_pending, timeout=90, what=f"the first add\n{worker.log_tail()}")

        stopping = time.monotonic()
        launcher.redis_stop(redis_dir)
        try:
            took = []
            for number in (1, 2):
                for user in ("ann", "bea", "cal"):
                    took.append(add_over_http(alice, user, f"note {user} {number}"))
                    time.sleep(OUTAGE_SECONDS / 6)  # down for a few seconds, as a restart is
            assert max(took) < 3  # no waiting on the broker
            health = session.get(f"{web.url}/health", timeout=30).json()
            assert (health["status"], health["redis"]) == ("degraded", "down")
            # Stored, each user's turns with one queued job, which nothing could publish.
            assert Message.objects.filter(extraction="pending").count() == 12
            assert ExtractionJob.objects.filter(status="queued").count() == 3
        finally:
            launcher.redis_ensure(redis_dir)
        back = time.monotonic()

        # New work goes through at once: the web server publishes again and the worker's
        # consumer has reconnected, both by themselves. (Another tenant's: a run takes every
        # queued job of its organization, and would take alice's along.)
        add_over_http(bob, "dan", "note dan 1")
        new_add_stored = wait_until(
            lambda: EpisodicMemory.objects.filter(summary="user: note dan 1").exists(),
            timeout=60,
            what=f"an add made after Redis came back\n{worker.log_tail()}",
        )
        # Work stored while Redis was down is published by the recovery beat job (every minute,
        # work older than EXTRACTION_REQUEUE_AFTER); here its service is called at once. (The
        # new add's task may have taken some of it already: a task claims the fairest queued
        # jobs, not only its own, so a lost task's job does not wait for its own token.)
        assert extraction_jobs_recover(older_than=timedelta(0)) <= 3
        all_stored = wait_until(
            nothing_pending, timeout=60, what=f"every turn\n{worker.log_tail()}"
        )
        recovery_time("Redis outage (stop called -> started)", back - stopping)
        recovery_time(
            "Redis back -> a new add stored (web and worker reconnected)", new_add_stored - back
        )
        recovery_time(
            "Redis back -> adds made while down stored (recovery job called at once)",
            all_stored - back,
        )

    summaries = Counter(EpisodicMemory.objects.values_list("end_user__user_id", "summary"))
    expected = {("ann", "user: note ann 0"), ("dan", "user: note dan 1")} | {
        (user, f"user: note {user} {number}") for number in (1, 2) for user in ("ann", "bea", "cal")
    }
    assert summaries == dict.fromkeys(expected, 1)
    assert set(ExtractionJob.objects.values_list("status", flat=True)) == {"succeeded"}


def test_redis_restarted_while_a_task_runs_the_worker_consumes_again(
    tmp_path: Path, llm: StallingLLM, recovery_time: RecoveryTime
) -> None:
    alice, bob = tenant_fixture("alice"), tenant_fixture("bob")
    redis_dir = launcher.data_dir() / "redis"
    # Two children, so that while one holds a task (delivered, not acknowledged: acks_late) the
    # consumer waits on Redis for the next (a BRPOP in flight): both are lost with Redis.
    with processes.celery_worker(tmp_path, concurrency=2, **llm.environment) as worker:
        add(alice, "ann", "note ann 0")
        wait_until(nothing_pending, timeout=90, what=f"the first add\n{worker.log_tail()}")
        llm.stall()
        add(alice, "ann", "note ann 1")
        wait_until(llm.stalled.is_set, timeout=60, what="the worker to call the LLM")

        stopping = time.monotonic()
        launcher.redis_stop(redis_dir)
        try:
            wait_until(
                lambda: b"Connection to broker lost" in worker.log.read_bytes(),
                timeout=30,
                what=f"the worker to see Redis go\n{worker.log_tail()}",
            )
        finally:
            launcher.redis_ensure(redis_dir)
        back = time.monotonic()

        # Another tenant's: a run takes every queued job of its organization.
        add(bob, "dan", "note dan 1")
        new_add_stored = wait_until(
            lambda: EpisodicMemory.objects.filter(summary="note dan 1").exists(),
            timeout=60,
            what=f"an add made after Redis came back\n{worker.log_tail()}",
        )
        # The held task was cancelled with the connection, its job left running with no runner:
        # the recovery beat job's (called at once here) to queue again.
        llm.release()
        extraction_jobs_recover(older_than=timedelta(0))
        wait_until(nothing_pending, timeout=60, what=f"every turn\n{worker.log_tail()}")
        recovery_time("Redis outage mid-task (stop called -> started)", back - stopping)
        recovery_time("Redis restarted mid-task -> a new add stored", new_add_stored - back)
        assert worker.alive()

    summaries = Counter(EpisodicMemory.objects.values_list("end_user__user_id", "summary"))
    assert summaries == {
        ("ann", "note ann 0"): 1,
        ("ann", "note ann 1"): 1,
        ("dan", "note dan 1"): 1,
    }
