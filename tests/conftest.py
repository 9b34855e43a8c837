from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterator

import pytest
from celery.contrib.testing.worker import start_worker
from django.apps import apps
from django.core.servers.basehttp import WSGIRequestHandler
from django.db.models.signals import post_migrate
from pytest_django import DjangoDbBlocker

from images import fetch as image_fetch_module
from mirix_site.celery import app as celery_app
from mirix_site.common.redis import redis_client
from mirix_site.common.rowsmemo import rows_memos_clear
from mirix_site.providers.embeddings import embedding_provider_from_settings
from mirix_site.search.gate import gate_calibration_ensure
from mirix_site.search.lanes import lanes_close
from mirix_site.search.models import GateCalibration
from mirix_site.search.vectors import own_index_seen_forget
from skills import embedding_queue
from skills.models import ActionGroupingCalibration
from skills.services.grouping import grouping_calibration_ensure
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


def _fresh_install_calibrations(**_: object) -> None:
    """The calibrations a fresh install searches, recommends and groups actions with (its
    migrations' and its first start's, for the bundled model), so that the tests run the
    shipped gates. Each is measured once per process (about 25 s, action grouping's the most)
    and inserted again after every flush: a transactional test empties every table, and
    Django's flush then sends ``post_migrate``, as ``migrate`` does."""
    embedder = embedding_provider_from_settings()
    gate_calibration_ensure(embedder)
    grouping_calibration_ensure(embedder)


# The settings keep ``migrate`` from measuring (GATE_CALIBRATE_ON_MIGRATE): here they are
# measured once, not once per migration that measures, and come back after every flush.
post_migrate.connect(
    _fresh_install_calibrations,
    sender=apps.get_app_config("skills"),
    dispatch_uid="tests-fresh-install-calibrations",
)


@pytest.fixture(scope="session", autouse=True)
def _calibrated_test_database(django_db_setup: None, django_db_blocker: DjangoDbBlocker) -> None:
    """A database kept from an earlier run (``--reuse-db``) was not migrated again: it may
    have been left flushed."""
    with django_db_blocker.unblock():
        _fresh_install_calibrations()


@pytest.fixture
def similarity_gate_off(db: None) -> None:
    """No gate calibration for any model or kind: every search keeps what its lanes found,
    as an install whose model was never calibrated does (with a warning)."""
    GateCalibration.objects.all().delete()
    rows_memos_clear()


@pytest.fixture
def action_grouping_uncalibrated(db: None) -> None:
    """No action-grouping calibration: phrasings are grouped by their words only."""
    ActionGroupingCalibration.objects.all().delete()


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
