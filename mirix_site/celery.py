"""The Celery application.

Queues: ``ingest`` (extraction), ``learning`` (skill runs), ``maintenance`` (beat jobs).
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mirix_site.settings.local")

app = Celery("mirix_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
