"""The Celery application.

Queues: ``ingest`` (extraction), ``learning`` (skill runs), ``maintenance`` (beat jobs).
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

import redis
from celery import Celery, bootsteps
from celery.worker import WorkController
from django.conf import settings
from kombu.asynchronous.timer import Entry
from kombu.transport import TRANSPORT_ALIASES

from mirix_site.common.redis import redis_client
from mirix_site.nodes import WORKER_HEARTBEAT_SECONDS, WORKER_HEARTBEAT_TTL, worker_heartbeat_key

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mirix_site.settings.local")

logger = logging.getLogger(__name__)

# redis:// and rediss:// URLs get kombu's Redis transport with our fix, so that a worker that loses
# Redis while a task runs reconnects (mirix_site/broker.py). An alias, not the broker_transport
# setting: URLs, the worker's banner and Flower's broker page keep their scheme. Set before any
# connection.
for scheme in ("redis", "rediss"):
    TRANSPORT_ALIASES[scheme] = "mirix_site.broker:Transport"


class NodeHeartbeat(bootsteps.StartStopStep):
    """A worker's sign of life for its node's ``GET /health``: a Redis key that expires
    (``nodes.worker_heartbeat_key``), set again by the worker's own timer, so a worker whose
    loop stalls or whose process died stops renewing it."""

    requires = ("celery.worker.components:Timer",)

    def __init__(self, parent: WorkController, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.renewal: Entry | None = None

    def start(self, parent: WorkController) -> None:
        self._renew(parent.hostname)
        self.renewal = parent.timer.call_repeatedly(
            WORKER_HEARTBEAT_SECONDS, self._renew, (parent.hostname,)
        )

    def stop(self, parent: WorkController) -> None:
        if self.renewal is not None:
            self.renewal.cancel()
        with contextlib.suppress(redis.RedisError):  # otherwise it expires
            redis_client().delete(worker_heartbeat_key(settings.NODE_NAME))

    def _renew(self, hostname: str) -> None:
        try:
            redis_client().set(
                worker_heartbeat_key(settings.NODE_NAME), hostname, ex=WORKER_HEARTBEAT_TTL
            )
        except redis.RedisError:
            logger.warning("worker heartbeat: Redis unreachable")


app = Celery("mirix_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.steps["worker"].add(NodeHeartbeat)
app.autodiscover_tasks()
