"""``manage.py redact_stored [--dry-run]``: redact sensitive values from everything stored that
is derived from turns (memories, experiences and lessons, recommendations, skills and every
version of them, and the history of memories' and experiences' changes), as the detector finds
them today. Run by the migration that brought the
detector's new forms; run it again after the detector learns more."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand

from memory.services.redaction import memories_redact_stored
from mirix_site.common.history import history_redact, tracked_models
from sessions.sensitive import sensitive_redacted
from skills.services.redaction import learned_redact_stored


class Command(BaseCommand):
    help = "Redact sensitive values from stored memories, experiences and skills."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what holds a value; change nothing."
        )
        parser.add_argument("--batch", type=int, default=500, help="Rows read at a time.")

    def handle(self, *args: Any, dry_run: bool, batch: int, **options: Any) -> None:
        counts = {
            **{
                f"{name} memories": count
                for name, count in memories_redact_stored(dry_run=dry_run, batch=batch).items()
            },
            **learned_redact_stored(dry_run=dry_run, batch=batch),
        }
        # Last: the rows' own redaction above wrote their values before it into their history.
        counts["changes kept in history"] = sum(
            history_redact(model, sensitive_redacted, dry_run=dry_run, batch=batch)
            for model in tracked_models()
        )
        verb = "hold" if dry_run else "redacted"
        for what, count in counts.items():
            self.stdout.write(f"{what}: {count} {verb}")
