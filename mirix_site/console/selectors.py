"""Reads of the roll-up's own state."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Max

from mirix_site.console.models import DailyFigure


def daily_figures_rolled_up_at() -> datetime | None:
    """When the roll-up job last ran (it rewrites today's figures every time): the worker's
    and beat's pulse as the dashboard sees it."""
    return DailyFigure.objects.aggregate(at=Max("updated_at"))["at"]
