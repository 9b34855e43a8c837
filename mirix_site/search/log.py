"""The retrieval log: one row per retrieval request, written once the answer is sent
(``mirix_site.common.after_answer``: the client does not wait for it). Writing it never fails
the request; rows older than ``RETRIEVAL_LOG_RETENTION_DAYS`` are purged
(``retrieval_logs_purge``, a beat job)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, date, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Aggregate, Count, FloatField
from django.db.models.functions import TruncDate
from django.utils import timezone

from accounts.models import EndUser
from accounts.tenancy import Tenant
from mirix_site.common.after_answer import after_answer
from mirix_site.console.panels import DailyFigures, utc_day_range
from mirix_site.search.engine import SearchOutcome
from mirix_site.search.models import RetrievalLog

logger = logging.getLogger(__name__)


def retrieval_log_write(
    *,
    tenant: Tenant,
    end_user: EndUser | None,
    endpoint: str,
    query: str,
    method: str,
    kinds: list[str],
    outcome: SearchOutcome | None,
    latency_ms: float,
    extra: dict[str, Any] | None = None,
) -> None:
    if not settings.RETRIEVAL_LOG_ENABLED:
        return
    # Nothing of the answer depends on the row: it is written once the answer is sent.
    after_answer(
        lambda: _log_write(
            tenant=tenant,
            end_user=end_user,
            endpoint=endpoint,
            query=query,
            method=method,
            kinds=kinds,
            outcome=outcome,
            latency_ms=latency_ms,
            extra=extra,
        )
    )


def _log_write(
    *,
    tenant: Tenant,
    end_user: EndUser | None,
    endpoint: str,
    query: str,
    method: str,
    kinds: list[str],
    outcome: SearchOutcome | None,
    latency_ms: float,
    extra: dict[str, Any] | None,
) -> None:
    results = []
    gate: dict[str, Any] = {}
    if outcome is not None:
        results = [
            {
                "kind": hit.kind.name,
                "id": hit.row.pk,
                "score": round(hit.candidate.score, 6),
                "bm25_rank": hit.candidate.bm25_rank,
                "bm25_score": hit.candidate.bm25_score,
                "vector_rank": hit.candidate.vector_rank,
                "similarity": hit.candidate.similarity,
                "gate": hit.candidate.gate,
            }
            for hit in outcome.hits
        ]
        gate = {
            "model": outcome.embedding_model,
            "thresholds": {
                name: (
                    {
                        "min_similarity": thresholds.min_similarity,
                        "strong_similarity": thresholds.strong_similarity,
                    }
                    if thresholds is not None
                    else None
                )
                for name, thresholds in outcome.gate_thresholds.items()
            },
            "decisions": outcome.gate_counts,
        }
    if extra:
        gate["request"] = extra
    row = RetrievalLog(
        organization=tenant.organization,
        client=tenant.client,
        end_user=end_user,
        endpoint=endpoint,
        query=query[:10000],
        method=method,
        kinds=kinds,
        results=results,
        gate=gate,
        latency_ms=latency_ms,
    )
    try:
        if connection.in_atomic_block:
            # Its own savepoint: a failed insert must not poison the caller's transaction.
            with transaction.atomic():
                row.save(force_insert=True)
        else:
            # One statement in autocommit is its own transaction: no BEGIN and COMMIT round
            # trips around it (two of a recall's fourteen statements).
            row.save(force_insert=True)
    except (DatabaseError, ValueError, TypeError):
        logger.exception("retrieval log not written")


PURGE_BATCH = 10_000


def retrieval_logs_purge(
    *,
    older_than: timedelta | None = None,
    dry_run: bool = False,
    on_progress: Callable[[int], None] | None = None,
) -> int:
    """Delete retrieval-log rows older than ``RETRIEVAL_LOG_RETENTION_DAYS``, in batches (each
    its own transaction, so a large backlog never holds one long lock). Returns how many
    (``dry_run``: how many would go, deleting none); ``on_progress(purged)`` after each batch."""
    if older_than is None:
        older_than = timedelta(days=settings.RETRIEVAL_LOG_RETENTION_DAYS)
    cutoff = timezone.now() - older_than
    if dry_run:
        return RetrievalLog.objects.filter(created_at__lt=cutoff).count()
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
        if on_progress is not None:
            on_progress(purged)


class Percentile(Aggregate):
    """PostgreSQL's continuous percentile of an expression (``Percentile("latency_ms", 0.95)``)."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: str, fraction: float) -> None:
        super().__init__(expression, fraction=float(fraction))


def retrieval_daily_figures(first: date, last: date) -> DailyFigures:
    """Retrievals per UTC day from ``first`` to ``last``, with their latency's median and 95th
    percentile (ms): the dashboard's series, one scan of those days' rows on the time index."""
    start, end = utc_day_range(first, last)
    rows = (
        RetrievalLog.objects.filter(created_at__gte=start, created_at__lt=end)
        .annotate(day=TruncDate("created_at", tzinfo=UTC))
        .values("day")
        .annotate(
            count=Count("id"),
            p50=Percentile("latency_ms", 0.5),
            p95=Percentile("latency_ms", 0.95),
        )
        .order_by()
    )
    return {
        row["day"]: {"count": float(row["count"]), "p50": row["p50"], "p95": row["p95"]}
        for row in rows
    }
