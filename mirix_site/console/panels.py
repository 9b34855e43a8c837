"""What the dashboard shows, registered by each app from its admin module: panels (a chart or a
table of what the app holds) and daily series (what the roll-up computes a day at a time)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from urllib.parse import urlencode

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import SafeString

from mirix_site.console.models import DailyFigure

# A series' figures per day, for the days from ``first`` to ``last`` (both included).
DailyFigures = dict[date, dict[str, float]]


def utc_day_range(first: date, last: date) -> tuple[datetime, datetime]:
    """The moments from the start of UTC day ``first`` to the end of ``last``: the range a
    series' ``figures`` reads (``created_at >= start AND created_at < end``)."""
    return (
        datetime.combine(first, time.min, tzinfo=UTC),
        datetime.combine(last + timedelta(days=1), time.min, tzinfo=UTC),
    )


@dataclass(frozen=True)
class DailySeries:
    """A series the roll-up job computes from an app's rows, a day at a time. ``keys`` are
    written every day (0 when the day has none); ``figures`` may add others (a latency only
    where there were retrievals). The last ``settle_days`` days are computed again at each
    roll-up: a day's figures can change after it (a run finishes, an outcome comes back)."""

    name: str
    keys: tuple[str, ...]
    figures: Callable[[date, date], DailyFigures]
    settle_days: int = 2


@dataclass(frozen=True)
class Panel:
    """One box of the dashboard: a title, a chart or table, a line saying what it shows, and
    the admin list behind it."""

    title: str
    body: SafeString
    note: str = ""
    url: str | None = None


class Dashboard:
    """What panels draw from: the window's days and the roll-up's figures, read in one query."""

    def __init__(self, *, today: date | None = None) -> None:
        today = today or timezone.now().date()
        count = settings.DASHBOARD_DAYS
        self.days = [today - timedelta(days=count - 1 - offset) for offset in range(count)]
        self._figures: dict[str, DailyFigures] = defaultdict(lambda: defaultdict(dict))
        rows = DailyFigure.objects.filter(day__gte=self.days[0], day__lte=today)
        for series, day, key, value in rows.values_list("series", "day", "key", "value"):
            self._figures[series][day][key] = value

    def values(self, series: str, key: str) -> dict[date, float]:
        """One key of a series, by day (days without it left out)."""
        return {day: keys[key] for day, keys in self._figures[series].items() if key in keys}

    def total(self, series: str, key: str) -> float:
        return sum(self.values(series, key).values())


_panels: list[tuple[int, Callable[[Dashboard], list[Panel]]]] = []
_series: dict[str, DailySeries] = {}


def dashboard_register(order: int, panels: Callable[[Dashboard], list[Panel]]) -> None:
    """An app's panels (from its admin module), placed by ``order``."""
    _panels.append((order, panels))


def daily_series_register(series: DailySeries) -> None:
    """An app's daily series, computed by the roll-up job."""
    _series[series.name] = series


def panel_sources() -> list[Callable[[Dashboard], list[Panel]]]:
    """The registered apps' panel functions, in the dashboard's order (a bench times each)."""
    return [panels for _, panels in sorted(_panels, key=lambda registered: registered[0])]


def dashboard_panels(dashboard: Dashboard) -> list[Panel]:
    return [panel for panels in panel_sources() for panel in panels(dashboard)]


def daily_series() -> list[DailySeries]:
    return list(_series.values())


def list_url(model: type[models.Model], **filters: object) -> str:
    """The admin list of the model's rows, filtered (``state__exact="failed"``)."""
    meta = model._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
    return f"{url}?{urlencode(filters)}" if filters else url


def on_day(field: str, day: date) -> dict[str, str]:
    """The admin list filter of rows whose ``field`` falls on ``day``."""
    return {f"{field}__date": day.isoformat()}
