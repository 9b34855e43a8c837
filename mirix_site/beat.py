"""Celery beat on every node, scheduling on one at a time (``CELERY_BEAT_SCHEDULER``).

``LockedScheduler`` is django-celery-beat's ``DatabaseScheduler`` that reads, writes and sends
nothing unless its process holds ``BEAT_LOCK``, a PostgreSQL session-level advisory lock taken
on a connection of its own. A beat without it is a standby: it tries again every
``BEAT_LOCK_POLL_SECONDS``, and takes over once the holder is gone. The holder checks before
each tick (at most every 5 s, Celery's loop interval under this scheduler) that its session
still holds the lock; when its connection broke (PostgreSQL restarted, the network dropped) it
stops scheduling and tries again as a standby does.

Why PostgreSQL's lock rather than a Redis key with a time to live: PostgreSQL ends a client's
session, and frees its locks, the moment the client's process dies (SIGKILL and the
out-of-memory killer included), and within ``KEEPALIVE`` when its machine drops off the network
(its server-side keepalives); no lease is renewed on a timer that a paused process can miss,
and no clocks are compared. Beat depends on PostgreSQL already (its schedule lives there), and
Redis here keeps nothing across a restart (see the launcher), which would drop a lease while
its holder still runs.

The limit of "once": a holder cut off from PostgreSQL sends what falls due until its check
fails (within ``KEEPALIVE``), possibly beside a new holder. Every periodic job is safe to run
twice (each claims its work with a conditional update or takes a lock of its own), so such an
overlap costs work, never correctness. The lock needs a real session: connect beat to
PostgreSQL directly or through a pooler in session mode (in transaction mode a session lock
stays with a server connection the pooler reuses for others).
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection
from django_celery_beat.schedulers import DatabaseScheduler

from mirix_site.common import locks

logger = logging.getLogger(__name__)

# Its key among the project's others (mirix_site.common.locks): pg_locks shows it as classid 0,
# objid BEAT_LOCK.
BEAT_LOCK = locks.BEAT
# Every beat's lock connection is named this and its node's name (application_name), the
# holder's and the standbys' alike: /health reads from PostgreSQL whether its node's beat is
# connected and whether it holds the lock; a beat that died has no session left.
BEAT_CONNECTION_PREFIX = "mirix beat "
# Server- and client-side TCP keepalives of the lock connection: PostgreSQL drops the session
# of a holder whose machine went silent after about idle + interval x count = 25 s, freeing
# the lock; the holder's own check fails as soon (tcp_user_timeout). Unix sockets have none
# (a local client that dies closes its socket, which PostgreSQL sees at once).
KEEPALIVE = {"idle": 10, "interval": 5, "count": 3}

# Whether this session holds the lock: its row in pg_locks (a one-bigint key shows as
# classid, its high half, and objid, its low half).
_HOLDS_LOCK_SQL = """
SELECT EXISTS (
    SELECT FROM pg_locks
     WHERE pid = pg_backend_pid() AND locktype = 'advisory' AND granted
       AND classid = 0 AND objid = %(key)s::oid AND objsubid = 1
)
"""
# Whether a node's beat holds the lock: NULL when no beat of that node is connected.
_NODE_HOLDS_LOCK_SQL = """
SELECT bool_or(lock.pid IS NOT NULL)
  FROM pg_stat_activity AS activity
  LEFT JOIN pg_locks AS lock
    ON lock.pid = activity.pid AND lock.locktype = 'advisory' AND lock.granted
   AND lock.classid = 0 AND lock.objid = %(key)s::oid AND lock.objsubid = 1
 WHERE activity.datname = current_database() AND activity.application_name = %(name)s
"""


def beat_connection_name(node: str) -> str:
    return BEAT_CONNECTION_PREFIX + node


class BeatLock:
    """``BEAT_LOCK`` on a connection of its own: Django's connection, which the scheduler reads
    and writes its table with, is closed and opened again at will, which would let it go."""

    def __init__(self, *, node: str) -> None:
        self.node = node
        self.held = False
        self._connection: psycopg.Connection[Any] | None = None

    def hold(self) -> bool:
        """Whether this process holds the lock now. The holder checks that its session still
        does; anyone else tries to take it (a standby's connection stays open in between)."""
        try:
            if self._connection is None or self._connection.closed:
                self.held = False
                self._connection = psycopg.connect(autocommit=True, **self._connection_params())
            statement = _HOLDS_LOCK_SQL if self.held else "SELECT pg_try_advisory_lock(%(key)s)"
            row = self._connection.execute(statement, {"key": BEAT_LOCK}).fetchone()
            self.held = bool(row and row[0])
        except psycopg.Error as error:
            if self.held or self._connection is not None:
                logger.warning("beat: the lock's connection failed (%s)", error)
            self.release()
        return self.held

    def release(self) -> None:
        """Close the connection: PostgreSQL lets the lock go with the session."""
        self.held = False
        connection_, self._connection = self._connection, None
        if connection_ is not None:
            connection_.close()

    def _connection_params(self) -> dict[str, Any]:
        # Django's own parameters, but a plain psycopg connection (its cursor and adapters).
        params = dict(connection.get_connection_params())
        params.pop("cursor_factory", None)
        params.pop("context", None)
        server_options = (
            f"-c tcp_keepalives_idle={KEEPALIVE['idle']}"
            f" -c tcp_keepalives_interval={KEEPALIVE['interval']}"
            f" -c tcp_keepalives_count={KEEPALIVE['count']}"
            # An idle session timeout the server may set for everyone would end the holder's.
            " -c idle_session_timeout=0"
        )
        params["options"] = f"{params.get('options', '')} {server_options}".strip()
        silent_ms = 1000 * (KEEPALIVE["idle"] + KEEPALIVE["interval"] * KEEPALIVE["count"])
        params.update(
            application_name=beat_connection_name(self.node),
            connect_timeout=10,
            keepalives=1,
            keepalives_idle=KEEPALIVE["idle"],
            keepalives_interval=KEEPALIVE["interval"],
            keepalives_count=KEEPALIVE["count"],
            tcp_user_timeout=silent_ms,
        )
        return params


class LockedScheduler(DatabaseScheduler):
    """The DatabaseScheduler, active only while its process holds ``BEAT_LOCK``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.beat_lock = BeatLock(node=settings.NODE_NAME)
        self.active = False
        self._standby_logged = False
        super().__init__(*args, **kwargs)

    def setup_schedule(self) -> None:
        """Nothing until the lock is held (see ``_activate``): a standby writes nothing."""

    def tick(self, *args: Any, **kwargs: Any) -> float:
        held = self.beat_lock.hold()
        if held and not self.active:
            self._activate()
        elif not held and self.active:
            self._deactivate()
        if not self.active:
            if not self._standby_logged:
                logger.info("beat: standby on node %s (waiting for the beat lock)", self.node)
                self._standby_logged = True
            return settings.BEAT_LOCK_POLL_SECONDS
        return super().tick(*args, **kwargs)

    def close(self) -> None:
        # Writes the jobs' last runs first: the next holder must read them.
        try:
            super().close()
        finally:
            self.beat_lock.release()

    @property
    def node(self) -> str:
        return self.beat_lock.node

    def _activate(self) -> None:
        # Read the schedule afresh: another holder ran it meanwhile. Django's connection may
        # have died while this beat stood by (PostgreSQL restarted): a broken one is dropped
        # here, and if the schedule cannot be read yet the lock goes to whoever can.
        close_old_connections()
        self._initial_read, self._schedule, self._heap = True, None, None
        try:
            super().setup_schedule()
        except DatabaseError:
            logger.warning("beat: node %s cannot read its schedule yet", self.node, exc_info=True)
            self._initial_read, self._schedule = True, None
            self.beat_lock.release()
            return
        logger.info("beat: active on node %s (holds the beat lock)", self.node)
        self.active, self._standby_logged = True, False

    def _deactivate(self) -> None:
        logger.warning("beat: node %s lost the beat lock; standing by", self.node)
        self.active = False
        # Its unwritten last runs are forgotten: the next holder's are newer.
        self._dirty.clear()
        self._initial_read, self._schedule, self._heap, self.old_schedulers = True, None, None, None


def beat_state_read(*, node: str) -> str:
    """The beat of ``node``: ``active`` (holds the lock), ``standby`` (connected, waiting) or
    ``down`` (no beat of that node connected), from PostgreSQL's own sessions and locks."""
    with connection.cursor() as cursor:
        cursor.execute(_NODE_HOLDS_LOCK_SQL, {"key": BEAT_LOCK, "name": beat_connection_name(node)})
        (holds,) = cursor.fetchone()
    return "down" if holds is None else ("active" if holds else "standby")
