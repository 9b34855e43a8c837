"""Which database errors mean "out of reach, try later" (503, a worker's retry): real errors of
the real PostgreSQL, raised through Django as the API and the workers see them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import DatabaseError, connection
from django.db.backends.base.base import BaseDatabaseWrapper

from mirix_site.database import database_unreachable

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
