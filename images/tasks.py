"""Celery tasks of the image store: thin wrappers that take ids and call one service."""

from __future__ import annotations

import logging
import random
from datetime import timedelta

from celery import shared_task
from django.conf import settings

from images.fetch import ImageFetchError
from images.selectors import image_fetches_pending
from images.services import (
    FETCH_ATTEMPTS,
    IMAGE_FETCH_TASK,
    image_fetch_publish,
    image_fetch_run,
)
from mirix_site.common.database import database_unreachable

logger = logging.getLogger(__name__)


@shared_task(name=IMAGE_FETCH_TASK, bind=True, max_retries=FETCH_ATTEMPTS, acks_late=True)
def image_fetch_task(self, fetch_id: int, *, org: str | None = None) -> str | None:  # noqa: ANN001
    """Fetch one remote image (ingest queue). A failure that may pass (a timeout, a 5xx, the
    database restarting) is retried with backoff; the service records the last one. ``org``
    only labels it for Flower (mirix_site.common.publish.task_labels); a message sent without
    it runs the same."""
    try:
        fetch = image_fetch_run(fetch_id=fetch_id)
    except Exception as error:
        transient = isinstance(error, ImageFetchError) and error.transient
        if not transient and not database_unreachable(error):
            raise
        countdown = random.uniform(0.5, 1.0) * min(300.0, 2.0 * 2**self.request.retries)  # noqa: S311
        raise self.retry(countdown=countdown, exc=error) from error
    return fetch.status if fetch is not None else None


@shared_task
def recover_image_fetches() -> int:
    """The safety net of remote images: pending fetches whose task the broker lost."""
    pending = image_fetches_pending(older_than=timedelta(seconds=settings.EXTRACTION_REQUEUE_AFTER))
    for fetch_id, organization_id in pending:
        image_fetch_publish(fetch_id=fetch_id, organization_id=organization_id)
    if pending:
        logger.info("queued %s image fetches again", len(pending))
    return len(pending)
