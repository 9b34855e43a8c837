"""``manage.py reembed --model M``: give every memory vectors of embedding model M.

Run it beside the running server, with the server's current settings (they name the model
searches read now); name the new model with the options. It embeds memories in batches, each
committed on its own, so an interrupted run resumes where it stopped. Vectors are loaded first
and each table's HNSW index for M is built after (building it during the load is several times
slower), concurrently, so writes go on. When nothing is left the model's space is marked
ready; searches switch to it once the server's ``EMBEDDING_*`` settings name it (until then,
and if they name it earlier, they read the last ready model).
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import timezone

from memory.models import EmbeddingSpace
from memory.models.records import DEFAULT_EMBEDDING_MODEL
from memory.providers.embeddings import (
    EmbeddingProvider,
    EmbeddingSettings,
    embedding_provider,
    embedding_provider_from_settings,
)
from memory.retrieval.vectors import shared_index_name
from memory.services.records import embeddings_write
from memory.services.vector_indexes import hnsw_index_create, index_exists, vector_indexes_sync
from memory.types import MEMORY_TYPES, SEARCHABLE_TYPES


class Command(BaseCommand):
    help = "Embed every memory with another embedding model, resumably; index it; mark it ready."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--model", required=True, help="the model to fill")
        parser.add_argument("--provider", choices=["local", "openai", "gemini"])
        parser.add_argument("--api-base", default=None)
        parser.add_argument("--api-key", default=None, help="default: EMBEDDING_API_KEY")
        parser.add_argument("--dimensions", type=int, default=None)
        parser.add_argument("--batch", type=int, default=256, help="memories per transaction")
        parser.add_argument(
            "--max-batches", type=int, default=None, help="stop after this many (then resume later)"
        )

    def _target(self, options: dict[str, Any]) -> EmbeddingProvider:
        configured = embedding_provider_from_settings()
        if options["model"] == configured.model_name and not options["provider"]:
            return configured
        return embedding_provider(
            EmbeddingSettings(
                provider=options["provider"] or settings.EMBEDDING_PROVIDER,
                model=options["model"],
                api_base=options["api_base"],
                api_key=options["api_key"] or settings.EMBEDDING_API_KEY,
                dimensions=options["dimensions"],
            )
        )

    def _record_current(self) -> None:
        """The model searches read today becomes a ready space, so that they keep reading it
        until the new one is complete."""
        if EmbeddingSpace.objects.exists():
            return
        current = embedding_provider_from_settings()
        EmbeddingSpace.objects.get_or_create(
            model=current.model_name,
            defaults={
                "provider": settings.EMBEDDING_PROVIDER,
                "dimensions": current.dimensions,
                "api_base": settings.EMBEDDING_API_BASE or "",
                "status": EmbeddingSpace.Status.READY,
                "completed_at": timezone.now(),
            },
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            target = self._target(options)
        except ValueError as error:
            raise CommandError(str(error)) from None
        self._record_current()
        space, _ = EmbeddingSpace.objects.get_or_create(
            model=target.model_name,
            defaults={
                "provider": options["provider"] or settings.EMBEDDING_PROVIDER,
                "dimensions": target.dimensions,
                "api_base": options["api_base"] or "",
            },
        )
        if space.dimensions != target.dimensions:
            raise CommandError(
                f"{space.model} was recorded with {space.dimensions} dimensions, "
                f"not {target.dimensions}."
            )
        batches = 0
        for type_name in SEARCHABLE_TYPES:
            kind = MEMORY_TYPES[type_name]
            missing = kind.model.objects.filter(superseded_by__isnull=True).exclude(
                embeddings__model=target.model_name
            )
            total = missing.count()
            done, began, last_id = 0, time.monotonic(), 0
            while options["max_batches"] is None or batches < options["max_batches"]:
                rows = list(missing.filter(pk__gt=last_id).order_by("pk")[: options["batch"]])
                if not rows:
                    break
                with transaction.atomic():
                    embeddings_write(rows=[(kind, row) for row in rows], embedders=[target])
                last_id, done, batches = rows[-1].pk, done + len(rows), batches + 1
                rate = done / max(time.monotonic() - began, 1e-6)
                self.stdout.write(
                    f"{type_name}: {done}/{total} ({100 * done / max(total, 1):.0f}%), "
                    f"{rate:.0f} memories/s, about {(total - done) / max(rate, 1e-6):.0f} s left"
                )
        if options["max_batches"] is not None and batches >= options["max_batches"]:
            self.stdout.write(f"Stopped after {batches} batches; run again to resume.")
            return
        if target.model_name != DEFAULT_EMBEDDING_MODEL:  # the default's indexes are migrations'
            for type_name in SEARCHABLE_TYPES:
                kind = MEMORY_TYPES[type_name]
                if not index_exists(shared_index_name(kind, target.model_name)):
                    self.stdout.write(
                        f"building the HNSW index of {type_name} for {target.model_name}"
                    )
                    hnsw_index_create(kind, target.model_name, target.dimensions)
        vector_indexes_sync(progress=self.stdout.write)  # large users' own, for this model too
        space.status = EmbeddingSpace.Status.READY
        space.completed_at = timezone.now()
        space.save(update_fields=["status", "completed_at"])
        self.stdout.write(f"{target.model_name} is ready.")
