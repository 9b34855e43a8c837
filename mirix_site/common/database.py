"""Is a database error the server being out of reach (restarting, failing over, a dropped
connection) rather than something wrong with the statement or the data? The first kind is
answered 503 by the API and retried by the workers; the second is a bug or bad input.

Project-level because the API's error handler and the apps' Celery tasks ask the same question.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import ParamSpec, TypeVar

from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.db.backends.utils import CursorWrapper

P = ParamSpec("P")
R = TypeVar("R")

# SQLSTATEs of a server out of reach: class 08 (connection exception), the server shutting
# down or not yet accepting connections (57P01 admin_shutdown, 57P02 crash_shutdown,
# 57P03 cannot_connect_now) and no connection slot free (53300 too_many_connections).
UNREACHABLE_SQLSTATE_CLASS = "08"
UNREACHABLE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "53300"})


def database_unreachable(error: BaseException) -> bool:
    """True for a lost or refused connection, or an error raised while handling one (a
    rollback or clean-up on the dead connection fails with an error of its own, of another
    type); False for every other error (a deadlock, a cancelled statement, a constraint, bad
    data: retrying the request as is would not help or the answer is not "try later")."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if _unreachable(current):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _unreachable(error: BaseException) -> bool:
    if isinstance(error, InterfaceError):
        # The connection object is closed: it broke during an earlier statement.
        return True
    if not isinstance(error, OperationalError):
        return False
    # Django re-raises the driver's error as its own, the driver's one as the cause.
    sqlstate = getattr(error.__cause__, "sqlstate", None)
    if sqlstate is None:
        # Raised by the driver itself, not the server: connection refused, socket closed,
        # server gone mid-statement, connect timeout.
        return True
    return sqlstate.startswith(UNREACHABLE_SQLSTATE_CLASS) or sqlstate in UNREACHABLE_SQLSTATES


def constraint_violated(error: BaseException) -> str | None:
    """The name of the constraint an ``IntegrityError`` broke (PostgreSQL's diagnostics),
    or None when it names none."""
    return getattr(getattr(error.__cause__, "diag", None), "constraint_name", None)


def atomic_run_again(
    lost_race: Callable[[str], bool], *, attempts: int = 3
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A decorator for a write that checks what is stored before it inserts: the function runs
    in a transaction of its own, and again (``attempts`` runs in all) when it fails on a unique
    constraint ``lost_race`` accepts by name. Such a failure means a concurrent transaction
    stored the same row first; the next run, in a new transaction, finds it."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @wraps(function)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            for attempt in range(attempts):
                try:
                    with transaction.atomic():
                        return function(*args, **kwargs)
                except IntegrityError as exc:
                    if attempt == attempts - 1 or not lost_race(constraint_violated(exc) or ""):
                        raise
            raise AssertionError("unreachable: the last attempt returns or raises")

        return run

    return decorate


def prepared_cursor(*, binary: bool = False) -> CursorWrapper:
    """A cursor of the default connection for a constant statement run on every request of a
    hot path: PostgreSQL plans it once per connection (``mirix_site.postgresql``); ``binary``:
    its results travel in binary format (large bytea values)."""
    return connection.prepared_cursor(binary=binary)  # type: ignore[attr-defined]  # our backend's
