"""Beat on every node, scheduling on one (mirix_site.beat): a beat schedules only while its
process holds the beat lock, stands by (writing and sending nothing) while another holds it,
takes over once the holder's session ends, and stops when its own connection is cut.
tests/test_nodes.py does the same with whole nodes killed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django_celery_beat.models import PeriodicTask

from mirix_site.beat import BEAT_LOCK, LockedScheduler, beat_connection_name, beat_state_read
from mirix_site.celery import app as celery_app
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def east(settings: Any) -> Iterator[LockedScheduler]:
    """The beat of node "east", not started: a test ticks it as beat's loop would."""
    settings.NODE_NAME = "east"
    scheduler = LockedScheduler(app=celery_app)
    try:
        yield scheduler
    finally:
        scheduler.close()


def _other_session() -> psycopg.Connection:
    """A session of its own, as another node's beat has."""
    params = dict(connection.get_connection_params())
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(autocommit=True, **params)


def _lock_taken(session: psycopg.Connection) -> bool:
    row = session.execute("SELECT pg_try_advisory_lock(%s)", [BEAT_LOCK]).fetchone()
    return bool(row and row[0])


def _ticked_active(scheduler: LockedScheduler) -> bool:
    scheduler.tick()
    return scheduler.active


def test_a_beat_stands_by_while_another_holds_the_lock_and_takes_over_when_it_dies(
    east: LockedScheduler,
) -> None:
    holder = _other_session()
    assert _lock_taken(holder)
    try:
        assert east.tick() == settings.BEAT_LOCK_POLL_SECONDS
        assert east.tick() == settings.BEAT_LOCK_POLL_SECONDS
        assert not east.active
        # A standby writes nothing: the schedule's rows are the holder's to write.
        assert not PeriodicTask.objects.exists()
        assert beat_state_read(node="east") == "standby"
    finally:
        holder.close()  # that node's beat died: PostgreSQL lets its lock go with its session

    # Once PostgreSQL has ended that session (at once, but not within the close() call).
    wait_until(lambda: _ticked_active(east), timeout=10, what="the lock to be free")
    assert beat_state_read(node="east") == "active"
    names = set(PeriodicTask.objects.values_list("name", flat=True))
    assert set(settings.CELERY_BEAT_SCHEDULE) <= names
    # While it holds the lock no one else can take it.
    with _other_session() as contender:
        assert not _lock_taken(contender)


def test_a_beat_whose_connection_is_cut_stops_scheduling_then_takes_the_lock_again(
    east: LockedScheduler,
) -> None:
    east.tick()
    assert east.active
    # PostgreSQL restarted, or the network dropped: its session, and the lock, are gone.
    with connection.cursor() as cursor:
        cursor.execute(
            # Returns once the session has ended (or after 5 s).
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
            " WHERE application_name = %s",
            [beat_connection_name("east")],
        )
    assert east.tick() == settings.BEAT_LOCK_POLL_SECONDS
    assert not east.active
    east.tick()
    assert east.active
    assert beat_state_read(node="east") == "active"


def test_a_stopped_beat_is_down_and_its_lock_free(east: LockedScheduler) -> None:
    assert beat_state_read(node="east") == "down"  # not ticked yet: not connected
    east.tick()
    east.close()
    wait_until(lambda: beat_state_read(node="east") == "down", timeout=10, what="its end")
    with _other_session() as next_holder:
        assert _lock_taken(next_holder)


def test_a_beat_whose_database_connection_died_while_it_stood_by_takes_over_all_the_same(
    east: LockedScheduler,
) -> None:
    holder = _other_session()
    assert _lock_taken(holder)
    east.tick()
    assert not east.active
    # PostgreSQL restarted meanwhile: the connection this process reads the schedule with is
    # dead, though nothing has noticed yet.
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    with _other_session() as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
    holder.close()
    wait_until(lambda: _ticked_active(east), timeout=10, what="the takeover")
    assert set(settings.CELERY_BEAT_SCHEDULE) <= set(
        PeriodicTask.objects.values_list("name", flat=True)
    )


def test_the_projects_advisory_locks_have_keys_of_their_own() -> None:
    """Two locks on one key exclude each other for nothing: the posting segments' sync once
    took beat's, and built nothing while a beat ran."""
    from mirix_site import beat, launcher
    from mirix_site.common import locks
    from mirix_site.search import segments, vector_indexes

    assert len(set(locks.KEYS.values())) == len(locks.KEYS)
    used = [beat.BEAT_LOCK, launcher.PREPARE_LOCK, vector_indexes.SYNC_LOCK, segments.SYNC_LOCK]
    assert sorted(used) == sorted(locks.KEYS.values())
