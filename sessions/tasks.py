"""Celery tasks of the conversation store."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.conf import settings

from sessions.services import sessions_close_idle


@shared_task
def close_idle_sessions() -> int:
    return sessions_close_idle(idle_for=timedelta(seconds=settings.SESSION_IDLE_TIMEOUT))
