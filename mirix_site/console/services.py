"""The roll-up: each registered daily series computed for the days the dashboard shows."""

from __future__ import annotations

from datetime import date, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from mirix_site.console.models import DailyFigure
from mirix_site.console.panels import daily_series

# Figures are kept this many days past the dashboard's window, then deleted.
KEPT_DAYS = 90


@transaction.atomic
def daily_figures_roll_up(*, today: date | None = None) -> int:
    """Compute each series for the window's days that have no figures yet and for its last
    ``settle_days`` days (the rest of the window is settled and kept), replacing what was
    there. Returns how many figures it wrote."""
    now = timezone.now()
    today = today or now.date()
    first = today - timedelta(days=settings.DASHBOARD_DAYS - 1)
    written = 0
    for series in daily_series():
        stored = set(
            DailyFigure.objects.filter(series=series.name, day__gte=first, day__lte=today)
            .values_list("day", flat=True)
            .distinct()
        )
        unsettled = today - timedelta(days=series.settle_days - 1)
        window = (first + timedelta(days=offset) for offset in range((today - first).days + 1))
        days = [day for day in window if day not in stored or day >= unsettled]
        if not days:
            continue
        figures = series.figures(days[0], days[-1])
        DailyFigure.objects.filter(series=series.name, day__in=days).delete()
        rows = [
            DailyFigure(series=series.name, day=day, key=key, value=value, updated_at=now)
            for day in days
            for key, value in {
                **dict.fromkeys(series.keys, 0.0),
                **figures.get(day, {}),
            }.items()
        ]
        DailyFigure.objects.bulk_create(rows)
        written += len(rows)
    DailyFigure.objects.filter(day__lt=today - timedelta(days=KEPT_DAYS)).delete()
    return written
