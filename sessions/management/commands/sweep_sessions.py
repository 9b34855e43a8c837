from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from sessions.services import sessions_close_idle


class Command(BaseCommand):
    help = (
        "Close the sessions idle longer than SESSION_IDLE_TIMEOUT (or --idle-hours), as beat "
        "does every 5 minutes: their task sessions then count toward skill learning."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--idle-hours",
            type=float,
            default=None,
            help=f"idle for longer than this (default SESSION_IDLE_TIMEOUT, "
            f"{settings.SESSION_IDLE_TIMEOUT / 3600:g} h)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="count the sessions it would close"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        hours = options["idle_hours"]
        idle_for = (
            timedelta(hours=hours)
            if hours is not None
            else timedelta(seconds=settings.SESSION_IDLE_TIMEOUT)
        )
        if options["dry_run"]:
            count = sessions_close_idle(idle_for=idle_for, dry_run=True)
            self.stdout.write(
                f"Dry run: {count:,} open sessions idle for more than {idle_for} would close. "
                "Nothing was changed."
            )
            return
        closed = sessions_close_idle(
            idle_for=idle_for,
            on_progress=lambda done, total: self.stdout.write(f"  {done:,} of {total:,}"),
        )
        self.stdout.write(f"Closed {closed:,} sessions idle for more than {idle_for}.")
