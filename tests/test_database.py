"""Which database errors mean "out of reach, try later" (503, a worker's retry): real errors of
the real PostgreSQL, raised through Django as the API and the workers see them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import DatabaseError, connection
from django.db.backends.base.base import BaseDatabaseWrapper
from psycopg.pq import Format

from mirix_site.common.database import database_unreachable, prepared_cursor
from mirix_site.postgresql.base import RECENT_USE_SECONDS

pytestmark = pytest.mark.django_db


@pytest.fixture
def own_connection() -> Iterator[BaseDatabaseWrapper]:
    """A second connection to the test database, which a test may break."""
    copy = connection.copy()
    try:
        yield copy
    finally:
        copy.close()


def error_of(wrapper: BaseDatabaseWrapper, statement: str) -> DatabaseError:
    with pytest.raises(DatabaseError) as raised, wrapper.cursor() as cursor:
        cursor.execute(statement)
    return raised.value


def test_a_server_that_refuses_connections_is_unreachable(
    own_connection: BaseDatabaseWrapper, tmp_path
) -> None:
    own_connection.settings_dict = {**own_connection.settings_dict, "HOST": str(tmp_path)}
    assert database_unreachable(error_of(own_connection, "SELECT 1"))


def test_a_connection_the_server_ended_is_unreachable(own_connection: BaseDatabaseWrapper) -> None:
    # As when PostgreSQL shuts down (fast mode) under an open connection.
    assert database_unreachable(
        error_of(own_connection, "SELECT pg_terminate_backend(pg_backend_pid())")
    )
    # The connection is then gone for every later statement.
    assert database_unreachable(error_of(own_connection, "SELECT 1"))


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT 1 / 0",  # data
        "SELECT * FROM no_such_table",  # programming
        "SET statement_timeout = 1; SELECT pg_sleep(1)",  # cancelled: OperationalError too
    ],
)
def test_an_error_of_the_statement_is_not(
    own_connection: BaseDatabaseWrapper, statement: str
) -> None:
    assert not database_unreachable(error_of(own_connection, statement))


def test_other_errors_are_not() -> None:
    assert not database_unreachable(ValueError("no"))


def test_an_error_raised_while_handling_a_lost_connection_is_unreachable_too(
    own_connection: BaseDatabaseWrapper,
) -> None:
    # A rollback or clean-up on the dead connection fails with an error of its own type.
    lost = error_of(own_connection, "SELECT pg_terminate_backend(pg_backend_pid())")
    try:
        raise lost
    except DatabaseError:
        try:
            raise RuntimeError("clean-up on a closed connection")
        except RuntimeError as during:
            assert database_unreachable(during)
    assert not database_unreachable(RuntimeError("clean-up, no outage"))


def _request(wrapper: BaseDatabaseWrapper, statement: str = "SELECT 1") -> None:
    """One request's use of the connection, between the checks Django makes at its ends."""
    wrapper.close_if_unusable_or_obsolete()
    try:
        with wrapper.cursor() as cursor:
            cursor.execute(statement)
    finally:
        wrapper.close_if_unusable_or_obsolete()


def _terminate(wrapper: BaseDatabaseWrapper) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [wrapper.connection.info.backend_pid])


def test_a_connection_that_just_answered_skips_the_health_check(
    own_connection: BaseDatabaseWrapper, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks: list[bool] = []
    usable = own_connection.is_usable
    monkeypatch.setattr(own_connection, "is_usable", lambda: checks.append(True) or usable())
    _request(own_connection)  # a new connection: healthy, unchecked
    _request(own_connection)
    _request(own_connection)
    assert checks == []  # each began moments after the last one worked
    own_connection.last_worked -= RECENT_USE_SECONDS
    _request(own_connection)
    assert checks == [True]  # idle longer: checked, as Django does

    # Ended by the server while idle: the check finds it, the request gets a new connection.
    _terminate(own_connection)
    own_connection.last_worked -= RECENT_USE_SECONDS
    _request(own_connection)
    # Ended moments after it worked: that one request fails as out of reach, and closes it.
    _terminate(own_connection)
    with pytest.raises(DatabaseError) as raised:
        _request(own_connection)
    assert database_unreachable(raised.value)
    assert own_connection.connection is None
    _request(own_connection)


def test_a_binary_prepared_cursor_reads_what_a_plain_cursor_reads() -> None:
    # The posting segments travel in binary (mirix_site.search.segments); a cursor under an
    # execute wrapper falls back to the plain one, in text: the values must not differ.
    statement = (
        "SELECT %(bytes)s::bytea, %(text)s::text, %(number)s::bigint, NULL::bytea, "
        "%(texts)s::text[], 0.25::float8"
    )
    params = {"bytes": b"\x00\xff\x10" * 1000, "text": "été", "number": 2**40, "texts": ["a"]}
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        expected = cursor.fetchone()
    assert bytes(expected[0]) == params["bytes"]
    with prepared_cursor(binary=True) as cursor:
        assert cursor.cursor.format == Format.BINARY
        cursor.execute(statement, params)
        assert tuple(cursor.fetchone()) == tuple(expected)
    wrapped = connection.execute_wrapper(lambda execute, *args: execute(*args))
    with wrapped, prepared_cursor(binary=True) as cursor:
        assert cursor.cursor.format == Format.TEXT
        cursor.execute(statement, params)
        assert tuple(cursor.fetchone()) == tuple(expected)


def test_psycopg_sends_a_list_of_small_ids_as_a_smallint_array() -> None:
    # Why an array parameter is cast to its column's type: PostgreSQL hashes ``= ANY(array)``
    # only when both sides hash alike, and bigint = ANY(smallint[]) does not. Uncast, a filter
    # over a bigint column compared each row with every id in turn: the statistics count of
    # 10,000 users of 100 took 224 s that way, ~25 times its time with the cast
    # (bench/RESULTS.md, 2026-12-07 (5)).
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_typeof(%s)::text, pg_typeof(%s::bigint[])::text", [[1, 2]] * 2)
        assert cursor.fetchone() == ("smallint[]", "bigint[]")


PROJECT_DIR = Path(__file__).resolve().parent.parent
SOURCE_DIRS = ("accounts", "bench", "images", "memory", "mirix_site", "sessions", "skills")
# ``= ANY(%(name)s`` or ``<> ALL(%s`` not followed by a cast.
UNCAST_ARRAY = re.compile(r"\b(?:ANY|ALL)\(%(?:\(\w+\))?s(?!::)")


def test_every_array_parameter_in_sql_is_cast_to_its_column_type() -> None:
    uncast = [
        f"{path.relative_to(PROJECT_DIR)}:{number}: {line.strip()}"
        for directory in SOURCE_DIRS
        for path in sorted((PROJECT_DIR / directory).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if UNCAST_ARRAY.search(line)
    ]
    assert uncast == []
