"""Celery tasks of the skills app: thin wrappers that take ids and call one service."""

from __future__ import annotations

import logging
import random
from datetime import timedelta

from celery import shared_task
from django.conf import settings

from memory.providers.embeddings import EmbeddingTransientError
from memory.retrieval.spaces import write_embedders
from mirix_site.database import database_unreachable
from skills.services.experiences import experiences_embed, experiences_unembedded

logger = logging.getLogger(__name__)

MAX_RETRIES = 5
# Experiences a sweep embeds at most; the next sweep takes the rest.
SWEEP_BATCH = 2000


@shared_task(bind=True, max_retries=MAX_RETRIES, acks_late=True)
def experiences_embed_task(self, experience_ids: list[int]) -> int:  # noqa: ANN001
    """Embed newly recorded experiences and group their actions' phrasings. Idempotent: a
    redelivery embeds only what still lacks an embedding. A provider's overload or a database
    restart is retried with backoff; after the last retry the beat sweep takes the rows."""
    try:
        return experiences_embed(experience_ids=experience_ids, embedders=write_embedders())
    except Exception as error:
        if not isinstance(error, EmbeddingTransientError) and not database_unreachable(error):
            raise
        countdown = random.uniform(0.5, 1.0) * min(900.0, 2.0 * 2**self.request.retries)  # noqa: S311
        raise self.retry(countdown=countdown, exc=error) from error


@shared_task
def embed_pending_experiences() -> int:
    """The safety net of experience embedding: rows whose job the broker lost."""
    embedders = write_embedders()
    pending = experiences_unembedded(
        model=embedders[0].model_name,
        limit=SWEEP_BATCH,
        older_than=timedelta(seconds=settings.EXTRACTION_REQUEUE_AFTER),
    )
    if pending:
        logger.info("embedding %s experiences the queue missed", len(pending))
        return experiences_embed(experience_ids=pending, embedders=embedders)
    return 0
