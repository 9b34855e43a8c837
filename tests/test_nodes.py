"""Nodes that come and go: two nodes, each the launcher's ``run`` (web, worker and beat in a
process group of its own, as on a machine of its own), on loopback against the test run's one
PostgreSQL and Redis. Adds arrive at both; the node whose beat schedules is SIGKILLed, its
whole process group, while its worker is in the middle of an extraction job, and started
again. What the README promises: every turn an add stored is extracted once (nothing lost,
nothing twice), no job is left behind, the other node answers throughout and its beat takes
over, and beat schedules on one node at a time, the restarted one standing by.

Extraction goes to a loopback LLM (one episodic memory per turn, citing it), each node's
worker under its own route, so that the victim's worker can be held mid-job when it dies."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
from django.conf import settings
from django.db import connection

from memory.models import EpisodicMemory, ExtractionJob
from mirix_site.beat import BEAT_CONNECTION_PREFIX, BEAT_LOCK
from mirix_site.celery import app as celery_app
from sessions.models import Message
from tests.factories import chat_turns, tenant_fixture
from tests.loopback import LoopbackServer, StallingLLM
from tests.processes import (
    Process,
    environment_on_test_database,
    free_port,
    process_start,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

RecoveryTime = Callable[[str, float], None]
USERS = [f"user-{number}" for number in range(6)]
# Seconds between one sender's adds: a steady burst both workers keep up with on two cores.
PACE = 0.15
SENDING_DUE = "Scheduler: Sending due task"
# Fast enough to see in a test what production does every minute: beat's recovery job runs
# every second (each send a line in the active beat's log) on work older than 2 s, and a
# standby beat tries the lock twice a second.
NODE_SETTINGS = {
    "NODE_PROCESSES": "web,worker,beat",
    "WEB_CONCURRENCY": "1",
    "WORKER_CONCURRENCY": "1",
    "BEAT_LOCK_POLL_SECONDS": "0.5",
    "EXTRACTION_RECOVERY_SECONDS": "1",
    "EXTRACTION_REQUEUE_AFTER": "2s",
}


@dataclass
class Node:
    """One node: its name, port and data directory stay across its lives (processes)."""

    name: str
    environment: dict[str, str]
    directory: Path
    lives: list[Process] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.environment['PORT']}"

    @property
    def process(self) -> Process:
        return self.lives[-1]

    def start(self) -> None:
        command = [sys.executable, "-m", "mirix_site.launcher", "run"]
        log = self.directory / f"life-{len(self.lives) + 1}.log"
        self.lives.append(process_start(self.name, command, self.environment, log))

    def health(self) -> dict[str, Any] | None:
        try:
            response = requests.get(f"{self.url}/health", timeout=5)
        except requests.RequestException:
            return None
        return response.json() if response.status_code == 200 else None

    def beat(self) -> str | None:
        health = self.health()
        return health["processes"]["beat"] if health else None

    def ready(self) -> bool:
        health = self.health()
        return health is not None and (
            health["node"] == self.name
            and health["processes"]["worker"] == "running"
            and health["processes"]["beat"] in {"active", "standby"}
        )


@dataclass
class Answer:
    node: str
    text: str
    status: int | None  # None: no answer (refused, reset: the node was down)
    sent: float


class Sender(threading.Thread):
    """Adds to one node, one at a time every PACE seconds, until stopped; a new connection
    after a failed one."""

    def __init__(self, node: Node, key: str) -> None:
        super().__init__(daemon=True)
        self.node, self.key = node, key
        self.answers: list[Answer] = []
        self.halt = threading.Event()

    def run(self) -> None:
        session = requests.Session()
        number = 0
        while not self.halt.is_set():
            text = f"note {self.node.name} {number}"
            body = {"user_id": USERS[number % len(USERS)], "messages": chat_turns(text, "Noted.")}
            sent = time.monotonic()
            try:
                response = session.post(
                    f"{self.node.url}/memory/add",
                    json=body,
                    headers={"X-API-Key": self.key},
                    timeout=15,
                )
                status: int | None = response.status_code
            except requests.RequestException:
                status, session = None, requests.Session()
            self.answers.append(Answer(self.node.name, text, status, sent))
            number += 1
            self.halt.wait(PACE)

    def accepted(self, *, after: float = 0.0) -> list[Answer]:
        return [a for a in list(self.answers) if a.status == 202 and a.sent >= after]


class BeatHolders(threading.Thread):
    """Samples, from PostgreSQL itself, which beat sessions of the test database hold the beat
    lock, every 0.1 s: the holders' node names, one set per sample."""

    SQL = """
    SELECT activity.application_name
      FROM pg_stat_activity AS activity
      JOIN pg_locks AS lock
        ON lock.pid = activity.pid AND lock.locktype = 'advisory' AND lock.granted
       AND lock.classid = 0 AND lock.objid = %s::oid AND lock.objsubid = 1
     WHERE activity.datname = current_database()
    """

    def __init__(self) -> None:
        super().__init__(daemon=True)
        params = dict(connection.get_connection_params())
        params.pop("cursor_factory", None)
        params.pop("context", None)
        self.params = params
        self.samples: list[frozenset[str]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        with psycopg.connect(autocommit=True, **self.params) as session:
            while not self.halt.is_set():
                rows = session.execute(self.SQL, [BEAT_LOCK]).fetchall()
                self.samples.append(
                    frozenset(name.removeprefix(BEAT_CONNECTION_PREFIX) for (name,) in rows)
                )
                self.halt.wait(0.1)

    def sequence(self) -> list[str]:
        """The holders in turn (consecutive samples of one holder once; gaps left out)."""
        order: list[str] = []
        for sample in self.samples:
            for name in sample:
                if not order or order[-1] != name:
                    order.append(name)
        return order


@pytest.fixture
def llm(loopback: LoopbackServer) -> Iterator[StallingLLM]:
    stalling = StallingLLM(loopback)
    try:
        yield stalling
    finally:
        stalling.release()


@pytest.fixture
def nodes(tmp_path: Path, llm: StallingLLM) -> Iterator[dict[str, Node]]:
    made = {}
    for name in ("north", "south"):
        directory = tmp_path / name
        directory.mkdir()
        environment = environment_on_test_database(
            **NODE_SETTINGS,
            **llm.environment_for(name),
            NODE_NAME=name,
            PORT=free_port(),
            MIRIX_DATA_DIR=str(directory),
            # The test run's export of the local model, not one more per node.
            LOCAL_MODEL_DIR=str(settings.LOCAL_MODEL_DIR),
        )
        made[name] = Node(name, environment, directory)
    try:
        yield made
    finally:
        llm.release()  # a held call would hold up a node's stop
        for node in made.values():
            for life in node.lives:
                life.kill()  # nothing of theirs is asserted after the test: no need to wait
        # What their beat sent and no worker took must not run in a later test's worker.
        with celery_app.connection_for_write() as broker:
            for queue in ("ingest", "images", "learning", "maintenance"):
                broker.default_channel.queue_purge(queue)


def _log_lines(process: Process) -> list[str]:
    return process.log.read_text(errors="replace").splitlines()


def _beat_lines(process: Process) -> list[str]:
    return [line for line in _log_lines(process) if "beat: " in line or SENDING_DUE in line]


@dataclass
class Kill:
    """What happened around the kill (``time.monotonic()`` moments)."""

    held: set[int]  # the extraction jobs running when the victim died
    killed: float
    took_over: float  # the survivor's beat active
    back: float  # the victim answering again, its beat standing by
    survivor_health: list[int | None]  # the survivor's /health meanwhile (None: no 200)


def _kill_and_start_again(
    victim: Node, survivor: Node, senders: dict[str, Sender], llm: StallingLLM
) -> Kill:
    wait_until(
        lambda: len(senders[victim.name].accepted()) >= 5, timeout=60, what="adds to the victim"
    )
    # The victim's worker in the middle of a job when it dies: claimed, its turns locked, its
    # transaction open, the job's run lock held by its session.
    llm.stall(victim.name)
    wait_until(llm.stalled.is_set, timeout=60, what="the victim's worker to call the LLM")
    held = set(
        ExtractionJob.objects.filter(status=ExtractionJob.Status.RUNNING).values_list(
            "pk", flat=True
        )
    )
    victim.process.kill()
    killed = time.monotonic()
    llm.release()
    victim.start()
    survivor_health: list[int | None] = []

    def survivor_beat(state: str) -> bool:
        health = survivor.health()
        survivor_health.append(200 if health else None)
        return health is not None and health["processes"]["beat"] == state

    took_over = wait_until(
        lambda: survivor_beat("active"), timeout=30, what="the survivor's beat to take over"
    )
    # Back: its web answers and its beat stands by (its worker may still be starting).
    back = wait_until(
        lambda: survivor_beat("active") and victim.beat() == "standby",
        timeout=150,
        what=f"the victim back\n{victim.process.log_tail()}",
    )
    wait_until(
        lambda: len(senders[victim.name].accepted(after=back)) >= 3,
        timeout=30,
        what="adds to the restarted victim",
    )
    return Kill(held, killed, took_over, back, survivor_health)


def _all_done() -> bool:
    """No job queued or running, every turn extracted."""
    return not (
        ExtractionJob.objects.filter(
            status__in=[ExtractionJob.Status.QUEUED, ExtractionJob.Status.RUNNING]
        ).exists()
        or Message.objects.exclude(extraction=Message.Extraction.PROCESSED).exists()
    )


def _progress(nodes: dict[str, Node]) -> str:
    jobs = Counter(ExtractionJob.objects.values_list("status", flat=True))
    turns = Counter(Message.objects.values_list("extraction", flat=True))
    tails = "\n".join(f"--- {node.name}\n{node.process.log_tail(2000)}" for node in nodes.values())
    return f"jobs {dict(jobs)}, turns {dict(turns)}\n{tails}"


def test_a_node_killed_mid_burst_and_started_again_loses_nothing_and_beat_runs_once(
    nodes: dict[str, Node], llm: StallingLLM, recovery_time: RecoveryTime
) -> None:
    alice = tenant_fixture("alice")
    for node in nodes.values():
        node.start()
    for node in nodes.values():
        wait_until(node.ready, timeout=150, what=f"{node.name} to start\n{node.process.log_tail()}")
    # One beat schedules, the other stands by: the one scheduling is the victim.
    beats = {name: node.beat() for name, node in nodes.items()}
    assert sorted(beats.values()) == ["active", "standby"], beats
    victim = next(node for node in nodes.values() if beats[node.name] == "active")
    survivor = next(node for node in nodes.values() if node is not victim)

    holders = BeatHolders()
    holders.start()
    try:
        senders = {node.name: Sender(node, alice.key) for node in nodes.values()}
        for sender in senders.values():
            sender.start()
        try:
            kill = _kill_and_start_again(victim, survivor, senders, llm)
        finally:
            for sender in senders.values():
                sender.halt.set()
                sender.join()
        try:
            drained = wait_until(_all_done, timeout=90, what="every job and turn")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{_progress(nodes)}") from None
    finally:
        holders.halt.set()
        holders.join()
    recovery_time("node SIGKILLed -> the other node's beat schedules", kill.took_over - kill.killed)
    recovery_time("node SIGKILLed -> started again and answering", kill.back - kill.killed)
    recovery_time("node SIGKILLed -> every turn extracted, no job left", drained - kill.killed)

    # The survivor answered every add and every health check, before and after the kill.
    assert {a.status for a in senders[survivor.name].answers} == {202}
    assert None not in kill.survivor_health
    # Every turn stored was extracted once: the accepted ones, and any the victim stored as it
    # died without answering. Nothing else.
    answers = [a for sender in senders.values() for a in sender.answers]
    assert {a.status for a in answers} <= {202, None}
    stored = Counter(Message.objects.filter(role=Message.Role.USER).values_list("text", flat=True))
    memories = Counter(EpisodicMemory.objects.values_list("summary", flat=True))
    assert memories == stored
    assert max(stored.values()) == 1
    accepted = {a.text for a in answers if a.status == 202}
    assert accepted <= set(stored)
    assert set(stored) - accepted <= {a.text for a in answers if a.status is None}
    # No job left behind: the victim's held ones ran again (beat's recovery job queued them),
    # or the user's next queued job took their turns.
    assert kill.held
    for job in ExtractionJob.objects.exclude(status=ExtractionJob.Status.SUCCEEDED):
        assert job.status == ExtractionJob.Status.FAILED
        assert "retried by the user's next queued job" in job.error, job.error

    # Beat: one holder at any moment; the victim, then the survivor, never the victim again.
    assert all(len(sample) <= 1 for sample in holders.samples)
    assert holders.sequence() == [victim.name, survivor.name]
    first_life, second_life = victim.lives
    lines = _beat_lines(first_life)
    assert any(f"active on node {victim.name}" in line for line in lines)
    assert any(SENDING_DUE in line for line in lines)
    # The survivor's beat stood by and sent nothing until it took the lock, then scheduled.
    lines = _beat_lines(survivor.process)
    activated = next(i for i, line in enumerate(lines) if f"active on node {survivor.name}" in line)
    assert any(f"standby on node {survivor.name}" in line for line in lines[:activated])
    assert not any(SENDING_DUE in line for line in lines[:activated])
    assert any(SENDING_DUE in line for line in lines[activated:])
    # The victim came back as a standby and sent nothing.
    lines = _beat_lines(second_life)
    assert any(f"standby on node {victim.name}" in line for line in lines)
    assert not any(SENDING_DUE in line or "active on node" in line for line in lines)
