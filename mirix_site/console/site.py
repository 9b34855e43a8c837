"""The admin site whose index is the dashboard."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone

from mirix_site.console.charts import Bar, bar_chart, table
from mirix_site.console.panels import Dashboard, Panel, dashboard_panels
from mirix_site.console.selectors import daily_figures_rolled_up_at
from mirix_site.health import database_ok, redis_ok
from mirix_site.metrics import queue_lengths


def health_panels() -> list[Panel]:
    """Whether PostgreSQL and Redis answer, whether the worker and beat keep the roll-up fresh,
    and what waits in each queue."""
    rolled_up_at = daily_figures_rolled_up_at()
    late_after = timedelta(seconds=3 * settings.DASHBOARD_ROLL_UP_SECONDS)
    if rolled_up_at is None:
        worker = "no roll-up yet"
    else:
        age = timezone.now() - rolled_up_at
        state = "ok" if age <= late_after else "late"
        worker = f"{state}: last roll-up {int(age.total_seconds())} s ago"
    lengths = queue_lengths()
    rows = [
        ["PostgreSQL", "ok" if database_ok() else "down"],
        ["Redis", "ok" if redis_ok() else "down"],
        ["Worker and beat", worker],
    ]
    panels = [
        Panel(
            "Health",
            table(["component", "state"], rows),
            note="The worker's pulse is the dashboard's roll-up, which beat sends every "
            f"{settings.DASHBOARD_ROLL_UP_SECONDS:g} s; late after three missed.",
        )
    ]
    if lengths is not None:
        panels.append(
            Panel(
                "Worker queues",
                bar_chart([Bar(name, length) for name, length in lengths.items()], label="queues"),
                note="Tasks waiting in each Celery queue now (Flower shows each task).",
            )
        )
    return panels


class ConsoleSite(admin.AdminSite):
    """Django's admin, whose index shows the dashboard above the list of models."""

    site_header = "mirix_site console"
    site_title = "mirix_site console"
    index_title = "Dashboard"
    index_template = "admin/console/index.html"

    def index(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> TemplateResponse:
        dashboard = Dashboard()
        context = {
            "dashboard_panels": [*dashboard_panels(dashboard), *health_panels()],
            **(extra_context or {}),
        }
        return super().index(request, extra_context=context)
