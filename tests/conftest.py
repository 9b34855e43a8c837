from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterator

import pytest
from celery.contrib.testing.worker import start_worker
from django.core.servers.basehttp import WSGIRequestHandler

from images import fetch as image_fetch_module
from mirix_site.celery import app as celery_app
from mirix_site.common.redis import redis_client
from mirix_site.common.rowsmemo import rows_memos_clear
from mirix_site.search.lanes import lanes_close
from mirix_site.search.vectors import own_index_seen_forget
from skills import embedding_queue
from tests.factories import TenantFixture, tenant_fixture
from tests.loopback import loopback  # noqa: F401  (fixture)

# live_server's handler writes an answer's headers and body apart; with Nagle's algorithm the
# body waits for the client's delayed ACK of the headers, 40 ms a request on keep-alive
# connections (50 ms a request measured, 3.5 ms without; the schemathesis run makes ~3,000).
WSGIRequestHandler.disable_nagle_algorithm = True


@pytest.fixture(scope="session", autouse=True)
def _lane_connections_closed(django_db_setup: None) -> Iterator[None]:
    """Hybrid searches outside a transaction open connections in the lane pool; they must be
    gone before the test database is dropped."""
    yield
    lanes_close()


@pytest.fixture(autouse=True)
def _own_indexes_asked_afresh() -> None:
    """A test's users, their indexes built or dropped, are asked about from its first search
    (the vector lane remembers usable own indexes for a minute)."""
    own_index_seen_forget()


@pytest.fixture(autouse=True)
def _rows_memos_forgotten() -> None:
    """A test's embedding spaces and calibrations are read afresh: the database is emptied
    between tests without the signals that clear the memos."""
    rows_memos_clear()


@pytest.fixture(scope="session", autouse=True)
def _image_fetches_stay_on_this_machine() -> Iterator[None]:
    """Whatever a test sends (schemathesis generates image URLs by the hundred), the image
    fetcher reaches loopback only and resolves no name but ``localhost``: a fetch a test did
    not mean to make fails instead of leaving the machine. tests/images/test_fetch.py wraps
    the same two steps with its own recorders, inside these."""
    connect, resolve = image_fetch_module._connect, image_fetch_module._system_resolve

    def loopback_connect(address: str, port: int, timeout: float) -> socket.socket:
        if not ipaddress.ip_address(address).is_loopback:
            raise ConnectionRefusedError(f"tests connect to loopback only, not {address}")
        return connect(address, port, timeout)

    def localhost_resolve(host: str, port: int) -> list[str]:
        if host != "localhost":
            raise socket.gaierror(socket.EAI_NONAME, f"tests resolve localhost only, not {host}")
        return resolve(host, port)

    # For a test that replaces getaddrinfo itself and checks how the fetcher calls it.
    localhost_resolve.unguarded = resolve  # type: ignore[attr-defined]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(image_fetch_module, "_connect", loopback_connect)
        patch.setattr(image_fetch_module, "_system_resolve", localhost_resolve)
        yield


@pytest.fixture
def org(db: None) -> TenantFixture:
    """Alice's organization: the caller in most tests."""
    return tenant_fixture("alice")


@pytest.fixture
def other_org(db: None) -> TenantFixture:
    """Bob's organization: its rows must never be visible to alice."""
    return tenant_fixture("bob")


@pytest.fixture
def worker(transactional_db: None) -> Iterator[None]:
    """A real Celery worker in this process, on the test database and Redis. A drain flag an
    earlier test left (its task never ran) would keep this one's records from starting one."""
    flags = [embedding_queue.DRAINING.format(slot=slot) for slot in range(8)]
    redis_client().delete(embedding_queue.QUEUE, *flags)
    with start_worker(
        celery_app,
        pool="solo",
        perform_ping_check=False,
        queues=["ingest", "images", "maintenance", "learning"],
        loglevel="WARNING",
    ):
        yield


RECOVERY_TIMES = pytest.StashKey[list[tuple[str, float]]]()


@pytest.fixture
def recovery_time(request: pytest.FixtureRequest) -> Callable[[str, float], None]:
    """Records a recovery time a fault test measured; the run's summary lists them."""
    times = request.config.stash.setdefault(RECOVERY_TIMES, [])
    return lambda label, seconds: times.append((label, seconds))


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    times = config.stash.get(RECOVERY_TIMES, [])
    if times:
        terminalreporter.section("fault recovery times (bench/RESULTS.md)")
        for label, seconds in times:
            terminalreporter.write_line(f"{seconds:7.2f} s  {label}")
