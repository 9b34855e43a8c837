from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from mirix_site.search.log import retrieval_logs_purge


class Command(BaseCommand):
    help = (
        "Delete retrieval-log rows older than RETRIEVAL_LOG_RETENTION_DAYS (or --older-than-days), "
        "in short batches, as beat does every hour."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than-days",
            type=float,
            default=None,
            help=f"default RETRIEVAL_LOG_RETENTION_DAYS ({settings.RETRIEVAL_LOG_RETENTION_DAYS})",
        )
        parser.add_argument("--dry-run", action="store_true", help="count the rows it would delete")

    def handle(self, *args: Any, **options: Any) -> None:
        days = options["older_than_days"]
        if days is not None and days < 0:
            raise CommandError("--older-than-days is 0 or more.")
        if days is None:
            days = settings.RETRIEVAL_LOG_RETENTION_DAYS
        older_than = timedelta(days=days)
        if options["dry_run"]:
            count = retrieval_logs_purge(older_than=older_than, dry_run=True)
            self.stdout.write(
                f"Dry run: {count:,} retrieval-log rows older than {days:g} days would be "
                "deleted. Nothing was changed."
            )
            return
        purged = retrieval_logs_purge(
            older_than=older_than,
            on_progress=lambda purged: self.stdout.write(f"  {purged:,} deleted"),
        )
        self.stdout.write(f"Deleted {purged:,} retrieval-log rows older than {days:g} days.")
