"""``manage.py posting_segments``: pack the postings of each owner with many documents now,
rather than at beat's next run (after a bulk load, say), and drop those no longer needed. See
``mirix_site.search.segments``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from mirix_site.search.segments import segments_sync


class Command(BaseCommand):
    help = "Build the posting segments large owners need; drop those no longer needed."

    def handle(self, *args: Any, **options: Any) -> None:
        outcome = segments_sync(progress=self.stdout.write)
        if outcome.skipped:
            self.stdout.write("Another sync is running; nothing done.")
            return
        for name in outcome.dropped:
            self.stdout.write(f"dropped {name}")
        self.stdout.write(f"{len(outcome.built)} built, {len(outcome.dropped)} dropped.")
