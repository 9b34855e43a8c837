"""Queueing a Celery task by its registered name, labelled with whom it serves.

A service queues its own app's task this way, not through the task object: the task module
imports the service it runs, so importing the task back closes an import cycle (which
tests/test_layout.py refuses). Routing is by name as well (``CELERY_TASK_ROUTES``), so a task
sent by name reaches the queue its object would have sent it to.
"""

from __future__ import annotations

from collections.abc import Mapping

from celery import current_app

# One quick retry: enough to replace a pooled connection that died with a Redis restart, short
# enough not to hold a web request when Redis is down.
QUICK_RETRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.1}


def task_labels(
    *, organization_id: str, user_id: str | None = None, token: bool = False
) -> dict[str, str]:
    """Whom a task serves, as keyword arguments its task accepts and ignores (``org``: the
    organization's id, ``user``: the end user's own ``user_id``).

    Keyword arguments rather than Celery's ``shadow`` name: Flower's task list shows them as
    sent, its search finds them exactly (``kwargs:org=org-…``, ``kwargs:user=sam``), and the
    task keeps its one name, so Flower's filter by task and its counts per task still work.
    Unlike ``kwargsrepr`` they are the message's real arguments, so a retry carries them.
    A task that claims whatever work is fairest (``token``: the extraction task) is labelled
    ``queued_for_org`` / ``queued_for_user``, whom it was queued for: what it then ran is its
    result, which Flower shows beside them."""
    prefix = "queued_for_" if token else ""
    labels = {f"{prefix}org": organization_id}
    if user_id is not None:
        labels[f"{prefix}user"] = user_id
    return labels


def task_publish(
    name: str,
    *args: object,
    labels: Mapping[str, str] | None = None,
    countdown: float | None = None,
    quick: bool = False,
) -> None:
    """Send the task registered as ``name`` with ``args`` and ``labels`` (``task_labels``) as
    its keyword arguments; ``countdown``: seconds before a worker may run it; ``quick``: give
    up on an unreachable broker after one fast retry (Celery's default policy retries for
    seconds). Raises what the broker raises: a caller that must never fail catches it."""
    options: dict[str, object] = {"retry": True, "retry_policy": QUICK_RETRY} if quick else {}
    if countdown is not None:
        options["countdown"] = countdown
    current_app.send_task(name, args=list(args), kwargs=dict(labels or {}), **options)
