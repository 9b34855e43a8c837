"""``manage.py backfill_skill_versions [--dry-run]``: write the versions and version counters
skills lack (``skills.services.backfill``); report the versions that cannot be mended."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from skills.services.backfill import skill_versions_backfill


class Command(BaseCommand):
    help = (
        "Give every skill a version holding its current text and a version counter equal to "
        "its newest version's number; report versions with an unknown author or a diff that is "
        "not their text's (versions are immutable). A second run writes nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="count what would be written; change nothing"
        )
        parser.add_argument("--batch", type=int, default=500, help="skills read at a time")

    def handle(self, *args: Any, dry_run: bool, batch: int, **options: Any) -> None:
        found = skill_versions_backfill(
            dry_run=dry_run,
            batch=batch,
            on_progress=lambda done: self.stdout.write(f"  {done:,} skills read"),
        )
        for line in found.left:
            self.stdout.write(f"  left: {line}")
        counts = (
            f"{found.versions_written:,} versions and {found.counters_set:,} version counters "
            f"of {found.skills:,} skills; {len(found.left):,} left as they are"
        )
        if dry_run:
            self.stdout.write(f"Dry run: would write {counts}. Nothing was changed.")
        else:
            self.stdout.write(f"Wrote {counts}.")
