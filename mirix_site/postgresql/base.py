"""Django's PostgreSQL backend, with its per-request health check skipped on a connection that
worked moments ago, and a cursor for statements PostgreSQL should plan once per connection.

``CONN_HEALTH_CHECKS`` makes the first query of every request (and of every search lane run in
the lane pool) a ``SELECT 1`` round trip first: 16 % of a single experience record's time in
the server under load, for connections that had just answered. A connection that ended its
last request or lane without a database error less than ``RECENT_USE_SECONDS`` ago is taken
as alive. The cost of being wrong: PostgreSQL restarted inside that window with no request on
the connection meanwhile, and the next request on it answers 503
(``mirix_site.common.database``) and closes it, as one that failed mid-request does;
connections idle for longer are checked as before, so a restart of the usual length (with
requests failing during it, which closes their connections) is still met by fresh ones.
"""

from __future__ import annotations

import math
import time

from django.db.backends.postgresql import base
from django.db.backends.utils import CursorWrapper
from psycopg.pq import Format

RECENT_USE_SECONDS = 5.0


class DatabaseWrapper(base.DatabaseWrapper):
    last_worked = -math.inf  # time.monotonic() when the connection last ended its use cleanly

    def close_if_unusable_or_obsolete(self) -> None:
        # Called as each request (or lane) ends and the next begins. At an end, a connection
        # that answered (its health check done or skipped) without an error is known alive.
        if self.connection is not None and self.health_check_done and not self.errors_occurred:
            self.last_worked = time.monotonic()
        super().close_if_unusable_or_obsolete()

    def close_if_health_check_failed(self) -> None:
        if (
            self.connection is not None
            and not self.health_check_done
            and time.monotonic() - self.last_worked < RECENT_USE_SECONDS
        ):
            self.health_check_done = True
            return
        super().close_if_health_check_failed()

    def connect(self) -> None:
        super().connect()
        self.last_worked = -math.inf

    def prepared_cursor(self, *, binary: bool = False) -> CursorWrapper:
        """A cursor (Django's wrapper: errors, query logging and execute wrappers as usual)
        whose parameters travel apart from the statement, so that the driver can make a
        statement run often on this connection a prepared one (after ``prepare_threshold``
        runs; ``DB_PREPARED_STATEMENTS``). PostgreSQL then parses and plans it once, not on
        every run: for the few constant statements every ``/memory/add`` runs (bench/RESULTS.md).
        Django's own cursors bind parameters into the text, which no server can prepare.

        Under an execute wrapper (the history context prefixes each statement with its
        ``set_config``) a statement becomes two, which a prepared statement cannot hold: there
        the plain cursor. ``/memory/add`` runs without one.

        ``binary``: results travel in PostgreSQL's binary format, loaded to the same Python
        values. A large bytea travels as its bytes, not as hex text decoded here: the posting
        segments a search reads (``mirix_site.search.segments``; bench/RESULTS.md). The plain
        cursor of the fallback reads the same values as text."""
        if self.execute_wrappers:
            return self.cursor()
        self.close_if_health_check_failed()
        self.ensure_connection()
        with self.wrap_database_errors:
            cursor = base.ServerBindingCursor(self.connection)
            if binary:
                cursor.format = Format.BINARY
            # As create_cursor: the connection's time zone for timestamptz values read back.
            tz_loader = self.connection.adapters.get_loader(base.TIMESTAMPTZ_OID, Format.TEXT)
            if self.timezone != tz_loader.timezone:
                base.register_tzloader(self.timezone, cursor)
            return self._prepare_cursor(cursor)
