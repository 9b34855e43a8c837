"""``manage.py vector_indexes``: give each user with many embeddings an HNSW index of their own
now, rather than at beat's next run (after a bulk load, say), and drop those no longer needed.
See ``mirix_site.search.vector_indexes``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from mirix_site.search.vector_indexes import vector_indexes_sync


class Command(BaseCommand):
    help = "Build the per-user HNSW indexes large users need; drop those no longer needed."

    def handle(self, *args: Any, **options: Any) -> None:
        outcome = vector_indexes_sync(progress=self.stdout.write)
        if outcome.skipped:
            self.stdout.write("Another sync is running; nothing done.")
            return
        for name in outcome.dropped:
            self.stdout.write(f"dropped {name}")
        for holder in outcome.holders:
            self.stdout.write(f"the shared graph serves {holder} (no own index)")
        self.stdout.write(f"{len(outcome.built)} built, {len(outcome.dropped)} dropped.")
