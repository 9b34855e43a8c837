"""The broker transport of ``redis://`` and ``rediss://`` URLs (``mirix_site.celery``): kombu's
Redis transport, with channels that keep the connection settings they were opened with.

When the worker loses Redis, Celery 5.7's consumer ``collect()``s the connection, which detaches
the transport from its settings (``transport.client = None``), then closes it again. A channel
that was waiting on a BRPOP could not finish its first close (reading the lost reply raised), so
the second one restores its unacknowledged messages (any late-acked task running) without
settings to connect with: an ``AttributeError``, which is no connection error. The consumer
never reconnected: "Unrecoverable error", a warm shutdown that waits for the running tasks, and
the worker exited. Acks the event loop runs after the loss, on the old channel, met the same
error. With the settings kept these calls reach Redis, or fail with a connection error, which
Celery expects. tests/test_faults.py restarts Redis while a task runs.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis


class Channel(redis.Channel):
    def __init__(self, connection: redis.Transport, *args: Any, **kwargs: Any) -> None:
        self._opened_with = connection.client
        super().__init__(connection, *args, **kwargs)

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection.client is None:
            # Collected: this transport serves no new channel, only this one's last calls.
            self.connection.client = self._opened_with
        return super()._connparams(asynchronous=asynchronous)


class Transport(redis.Transport):
    Channel = Channel
