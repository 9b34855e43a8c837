"""Celery tasks of the retrieval engine: its beat jobs, thin wrappers that call one function."""

from __future__ import annotations

from celery import shared_task

from mirix_site.search.log import retrieval_logs_purge
from mirix_site.search.segments import segments_sync
from mirix_site.search.vector_indexes import SYNC_TASK, vector_indexes_sync


@shared_task
def purge_retrieval_logs() -> int:
    return retrieval_logs_purge()


@shared_task(name=SYNC_TASK)
def sync_vector_indexes() -> int:
    """Large users' own HNSW indexes; returns how many were built or dropped."""
    outcome = vector_indexes_sync()
    return len(outcome.built) + len(outcome.dropped)


@shared_task
def sync_posting_segments() -> int:
    """Large owners' posting segments; returns how many were built or dropped."""
    outcome = segments_sync()
    return len(outcome.built) + len(outcome.dropped)
