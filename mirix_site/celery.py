"""The Celery application.

Queues: ``ingest`` (extraction), ``learning`` (skill runs), ``maintenance`` (beat jobs).
"""

from __future__ import annotations

import os

from celery import Celery
from kombu.transport import TRANSPORT_ALIASES

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mirix_site.settings.local")

# redis:// and rediss:// URLs get kombu's Redis transport with our fix, so that a worker that loses
# Redis while a task runs reconnects (mirix_site/broker.py). An alias, not the broker_transport
# setting: URLs, the worker's banner and Flower's broker page keep their scheme. Set before any
# connection.
for scheme in ("redis", "rediss"):
    TRANSPORT_ALIASES[scheme] = "mirix_site.broker:Transport"

app = Celery("mirix_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
