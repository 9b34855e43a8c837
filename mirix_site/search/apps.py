from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class SearchConfig(AppConfig):
    """The retrieval engine, below every app that registers searchable kinds with it."""

    name = "mirix_site.search"
    label = "search"
    verbose_name = "Search"

    def ready(self) -> None:
        from accounts.portability import portable_skip
        from mirix_site.search import checks  # noqa: F401  (registers the engine's system checks)
        from mirix_site.search.models import (
            DocumentStats,
            Posting,
            PostingSegment,
            RetrievalLog,
            SegmentChange,
            SegmentCover,
            TermStats,
        )

        for model in (
            Posting,
            TermStats,
            DocumentStats,
            PostingSegment,
            SegmentCover,
            SegmentChange,
        ):
            portable_skip(model, "The search index: an import indexes the rows again.")
        portable_skip(RetrievalLog, "An audit of this install's retrievals.")

        post_migrate.connect(_kind_codes_record, sender=self, dispatch_uid="kind_codes_record")


def _kind_codes_record(using: str, **kwargs: Any) -> None:
    """Sent once every app is migrated (kinds of apps after search included): the registered
    kinds' codes are taken from now on."""
    from mirix_site.search.kinds import kind_codes_record

    kind_codes_record(using=using)
