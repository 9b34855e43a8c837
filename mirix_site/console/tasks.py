from __future__ import annotations

from celery import shared_task

from mirix_site.console.services import daily_figures_roll_up


@shared_task(ignore_result=True)
def roll_up_daily_figures() -> int:
    """Beat's: the dashboard's figures of today (and any day of its window still missing)."""
    return daily_figures_roll_up()
