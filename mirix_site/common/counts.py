"""Counting a whole table without scanning a big one."""

from __future__ import annotations

import json
from dataclasses import dataclass

from django.db import connection, models

# Past this many rows (PostgreSQL's own estimate, kept by autovacuum's ANALYZE) a table is
# counted by the estimate: an exact count would scan it (100 ms and more at a million rows).
EXACT_COUNT_MAX = 200_000


@dataclass(frozen=True)
class TableCount:
    """How many rows a table holds, and whether that is PostgreSQL's estimate."""

    value: int
    estimated: bool

    @property
    def shown(self) -> str:
        return f"≈ {self.value:,}" if self.estimated else f"{self.value:,}"


def table_count(model: type[models.Model]) -> TableCount:
    """The model's rows: counted exactly up to ``EXACT_COUNT_MAX`` rows, estimated past it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
            [model._meta.db_table],
        )
        (estimate,) = cursor.fetchone()
    if estimate < EXACT_COUNT_MAX:  # -1: never analyzed yet
        return TableCount(model._default_manager.count(), estimated=False)
    return TableCount(int(estimate), estimated=True)


def planner_estimate(queryset: models.QuerySet) -> int:
    """The rows PostgreSQL's planner expects ``queryset`` to give (``EXPLAIN``, nothing run)."""
    plan = json.loads(queryset.order_by().explain(format="json"))
    return int(plan[0]["Plan"]["Plan Rows"])
