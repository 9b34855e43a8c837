"""The dashboard's roll-up: one figure of one series on one day."""

from __future__ import annotations

from django.db import models


class DailyFigure(models.Model):
    """One day's figure of a dashboard series (``retrievals`` ``p95`` on 2026-12-05: 18.4),
    written by the roll-up job from the rows of that day; the dashboard reads these, not the
    big tables. A day is a UTC day. Not tenant-owned: every figure is over all tenants."""

    day = models.DateField()
    series = models.CharField(max_length=32)
    key = models.CharField(max_length=32)
    value = models.FloatField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["series", "day", "key"]
        constraints = [
            models.UniqueConstraint(fields=["series", "day", "key"], name="daily_figure_unique")
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.series}.{self.key} = {self.value:g}"
