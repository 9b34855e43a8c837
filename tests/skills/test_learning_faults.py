"""A worker child SIGKILLed in the middle of a learning run: the run is finished by the next
child (the beat's recovery job, run here every second, publishes the run again once the dead
claim's heartbeat is stale), and nothing is written twice: one lesson per session, one version
per operation."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from skills.models import Experience, LearningRun, Skill, SkillVersion
from skills.tasks import recover_learning_runs
from tests import processes
from tests.factories import tenant_fixture
from tests.loopback import LoopbackServer, RecordedRequest, Reply, openai_reply
from tests.skills.sessions import CSV_TASKS, csv_session, session_send
from tests.skills.test_learning_llm import LESSON, Model, _schema
from tests.test_faults import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


class StallOnce:
    """The learning model, except that the third distiller call waits for ``release()``: the
    worker making it holds the run claimed, two sessions distilled and committed."""

    def __init__(self, server: LoopbackServer) -> None:
        self.model = Model([LESSON])
        self.stalled = threading.Event()
        self._released = threading.Event()
        self._distills = 0
        self._lock = threading.Lock()
        server.respond(self._answer)

    def release(self) -> None:
        self._released.set()

    def _answer(self, request: RecordedRequest) -> Reply:
        if _schema(request) == "lessons":
            with self._lock:
                self._distills += 1
                stall = self._distills == 3
            if stall:
                self.stalled.set()
                self._released.wait(60)
                return Reply(200, openai_reply({"lessons": []}))
        return self.model(request)


def test_a_worker_child_killed_mid_run_has_its_run_finished_once(
    tmp_path: Path, loopback: LoopbackServer, recovery_time, settings
) -> None:
    settings.LEARNING_RUN_STALE_AFTER = 2.0
    stall = StallOnce(loopback)
    alice = tenant_fixture("alice")
    environment = {
        "LLM_PROVIDER": "openai",
        "LLM_MODEL": "loopback",
        "LLM_API_BASE": f"{loopback.url}/v1",
        "LLM_API_KEY": "sk-loopback",
        "LEARNING_RUN_STALE_AFTER": "2s",
    }
    try:
        with processes.celery_worker(tmp_path, queues="learning", **environment) as worker:
            for index, task in enumerate(CSV_TASKS[:5]):
                session_send(alice.api, f"csv-{index}", csv_session(task))
            wait_until(stall.stalled.is_set, timeout=90, what=f"a run\n{worker.log_tail()}")
            [child] = worker.children()
            run = LearningRun.objects.get()
            assert run.state == "running" and run.attempts == 1
            os.kill(child, signal.SIGKILL)
            killed_at = time.monotonic()

            beats = [0.0]

            def finished() -> bool:
                if time.monotonic() - beats[0] >= 1.0:  # the beat's job (every minute in prod)
                    beats[0] = time.monotonic()
                    recover_learning_runs()
                return LearningRun.objects.filter(pk=run.pk, state="succeeded").exists()

            done = wait_until(
                finished, timeout=120, what=f"the killed run to finish\n{worker.log_tail()}"
            )
            recovery_time(
                "worker child SIGKILLed mid learning run -> run finished", done - killed_at
            )
    finally:
        stall.release()
    run.refresh_from_db()
    assert run.attempts == 2 and run.skills_created == 1
    # One lesson per session (two recorded before the kill, three after), none twice.
    per_session = Counter(
        Experience.objects.filter(distilled_by=run).values_list("source_session_id", flat=True)
    )
    assert len(per_session) == 5 and set(per_session.values()) == {1}
    # The one skill the model created, written once: the claim taken over found its version.
    [skill] = Skill.objects.all()
    assert skill.name == "read-legacy-csv" and skill.version == 1
    assert list(SkillVersion.objects.values_list("skill__name", "number", "run")) == [
        ("read-legacy-csv", 1, run.pk)
    ]
