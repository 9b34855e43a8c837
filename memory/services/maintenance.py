"""Periodic upkeep of the memory app's tables."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from memory.models import RetrievalLog

PURGE_BATCH = 10_000


def retrieval_logs_purge(*, older_than: timedelta | None = None) -> int:
    """Delete retrieval-log rows older than ``RETRIEVAL_LOG_RETENTION_DAYS``, in batches (each
    its own transaction, so a large backlog never holds one long lock). Returns how many."""
    if older_than is None:
        older_than = timedelta(days=settings.RETRIEVAL_LOG_RETENTION_DAYS)
    cutoff = timezone.now() - older_than
    purged = 0
    while True:
        with transaction.atomic():
            ids = list(
                RetrievalLog.objects.filter(created_at__lt=cutoff).values_list("pk", flat=True)[
                    :PURGE_BATCH
                ]
            )
            if not ids:
                return purged
            purged += RetrievalLog.objects.filter(pk__in=ids).delete()[0]
