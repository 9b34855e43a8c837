"""The processes `make run` starts, started for a test on the test database and Redis: the web
server (``launcher.web_command``, gunicorn) and a Celery worker with a prefork pool, whose
children a test can kill. Each writes its output to a log file that a failing test shows."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import requests
from django.db import connection

from mirix_site.launcher import PROJECT_DIR, web_command

START_TIMEOUT = 90.0
STOP_TIMEOUT = 20.0


def free_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


def environment_on_test_database(**extra: str) -> dict[str, str]:
    """This process's environment pointed at the test database (pytest-django's, not the one in
    DATABASE_URL) with the test settings."""
    parts = urlsplit(os.environ["DATABASE_URL"])
    database_url = urlunsplit(parts._replace(path="/" + connection.settings_dict["NAME"]))
    return os.environ | {
        "DJANGO_SETTINGS_MODULE": "mirix_site.settings.test",
        "DATABASE_URL": database_url,
        **extra,
    }


@dataclass
class Process:
    """A started process, its log, and its own process group (so its children stop with it)."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    url: str = ""  # a server's

    def log_tail(self, characters: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-characters:]

    def log_records(self, pattern: str, characters: int = 6000) -> str:
        """The log's lines that match ``pattern`` (a regular expression), the last
        ``characters`` of them: what a failure needs, without the tracebacks of a shutdown."""
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join(line for line in lines if re.search(pattern, line))[-characters:]

    def children(self) -> list[int]:
        path = Path(f"/proc/{self.popen.pid}/task/{self.popen.pid}/children")
        try:
            return [int(pid) for pid in path.read_text().split()]
        except OSError:
            return []

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL to its whole process group, as a machine losing power would do to it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()

    def stop(self) -> None:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=STOP_TIMEOUT)
        # The group: a pool child whose parent is gone must not outlive the test.
        self.kill()


def process_start(name: str, command: list[str], env: dict[str, str], log: Path) -> Process:
    """Started in a process group of its own, its output to ``log``; the caller stops it."""
    with log.open("wb") as output:
        popen = subprocess.Popen(  # noqa: S603 - our own programs
            command,
            cwd=PROJECT_DIR,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Process(name, popen, log)


@contextlib.contextmanager
def process_running(
    name: str, command: list[str], env: dict[str, str], log: Path
) -> Iterator[Process]:
    process = process_start(name, command, env, log)
    try:
        yield process
    finally:
        process.stop()


def wait_until(condition: Callable[[], bool], *, timeout: float, what: str) -> float:
    """Polls ``condition``; returns the monotonic time it first held."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)
    return time.monotonic()


def _wait_for(process: Process, ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while not ready():
        if not process.alive() or time.monotonic() > deadline:
            raise AssertionError(f"{process.name} did not start:\n{process.log_tail()}")
        time.sleep(0.2)


@contextlib.contextmanager
def web_server(log_dir: Path, *, workers: int = 1, **env: str) -> Iterator[Process]:
    """The real web server on the test database; yields it once /health answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            return requests.get(f"{url}/health", timeout=5).status_code == 200
        except requests.RequestException:  # not listening yet, or still loading the app
            return False

    environment = environment_on_test_database(WEB_CONCURRENCY=str(workers), **env)
    command = web_command(port=port, environ=environment)
    with process_running("web", command, environment, log_dir / "web.log") as web:
        web.url = url
        _wait_for(web, answers)
        yield web


@contextlib.contextmanager
def celery_worker(
    log_dir: Path, *, concurrency: int = 1, queues: str = "ingest", **env: str
) -> Iterator[Process]:
    """A real Celery worker on ``queues`` (prefork pool of ``concurrency`` children), started
    with the queues emptied of what earlier tests published; yields once it consumes."""
    command = [
        str(Path(sys.executable).parent / "celery"),
        "-A",
        "mirix_site",
        "worker",
        "--pool",
        "prefork",
        "--concurrency",
        str(concurrency),
        "--queues",
        queues,
        "--hostname",
        f"faults-{os.getpid()}@%h",
        "--purge",
        "--without-gossip",
        "--without-mingle",
        "--loglevel",
        "INFO",
    ]
    log = log_dir / "worker.log"
    with process_running("worker", command, environment_on_test_database(**env), log) as worker:
        _wait_for(worker, lambda: b" ready." in log.read_bytes())
        yield worker
