"""Queueing a Celery task by its registered name.

A service queues its own app's task this way, not through the task object: the task module
imports the service it runs, so importing the task back closes an import cycle (which
tests/test_layout.py refuses). Routing is by name as well (``CELERY_TASK_ROUTES``), so a task
sent by name reaches the queue its object would have sent it to.
"""

from __future__ import annotations

from celery import current_app

# One quick retry: enough to replace a pooled connection that died with a Redis restart, short
# enough not to hold a web request when Redis is down.
QUICK_RETRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.1}


def task_publish(name: str, *args: object, quick: bool = False) -> None:
    """Send the task registered as ``name`` with ``args``; ``quick``: give up on an unreachable
    broker after one fast retry (Celery's default policy retries for seconds). Raises what the
    broker raises: a caller that must never fail catches it."""
    options = {"retry": True, "retry_policy": QUICK_RETRY} if quick else {}
    current_app.send_task(name, args=list(args), **options)
