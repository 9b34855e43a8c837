"""Re-embedding: giving every current row of every searchable kind vectors of another embedding
model, beside the running server, resumably.

Rows are embedded in batches, each committed on its own, so an interrupted run resumes where it
stopped. Vectors are loaded first and each kind's shared HNSW index for the model is built after
(building it during the load is several times slower), concurrently, so writes go on. When
nothing is left the model's space is marked ready; searches switch to it once the server's
``EMBEDDING_*`` settings name it (until then, and if they name it earlier, they read the last
ready model: ``mirix_site.search.spaces``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Exists, OuterRef
from django.utils import timezone

from mirix_site.providers.embeddings import (
    LOCAL_MODEL_NAME,
    EmbeddingProvider,
    embedding_provider_from_settings,
)
from mirix_site.search.index import embeddings_write_committed
from mirix_site.search.kinds import SearchableKind, kinds
from mirix_site.search.models import EmbeddingSpace
from mirix_site.search.vector_indexes import hnsw_index_create, index_exists, vector_indexes_sync
from mirix_site.search.vectors import shared_index_name


class SpaceMismatchError(ValueError):
    """The model is on file with another size than the one asked for."""


@dataclass
class ReembedOutcome:
    batches: int = 0
    complete: bool = False  # every row has its vectors, the indexes are built, the space ready


def _space_of_current_settings() -> None:
    """The model searches read today becomes a ready space (on a first re-embed), so that they
    keep reading it until the new one is complete."""
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


def _missing(kind: SearchableKind, model: str):  # noqa: ANN202 (a queryset of any kind's model)
    embedded = kind.embedding_model.objects.filter(
        **{kind.embedding_attname: OuterRef("pk")}, model=model
    )
    return kind.model.objects.filter(kind.current).exclude(Exists(embedded))


def reembed_run(
    *,
    target: EmbeddingProvider,
    provider: str,
    api_base: str | None,
    batch: int,
    max_batches: int | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> ReembedOutcome:
    """Embed, with ``target``, every current row of every kind it has no vectors for; after the
    last batch build the model's indexes and mark its space ready. Stops after
    ``max_batches`` (then run it again to resume). Raises ``SpaceMismatchError`` for a model on
    file with another size."""
    _space_of_current_settings()
    space, _ = EmbeddingSpace.objects.get_or_create(
        model=target.model_name,
        defaults={
            "provider": provider,
            "dimensions": target.dimensions,
            "api_base": api_base or "",
        },
    )
    if space.dimensions != target.dimensions:
        raise SpaceMismatchError(
            f"{space.model} was recorded with {space.dimensions} dimensions, "
            f"not {target.dimensions}."
        )
    outcome = ReembedOutcome()
    for kind in kinds():
        missing = _missing(kind, target.model_name)
        total = missing.count()
        done, began, last_id = 0, time.monotonic(), 0
        while max_batches is None or outcome.batches < max_batches:
            rows = list(missing.filter(pk__gt=last_id).order_by("pk")[:batch])
            if not rows:
                break
            embeddings_write_committed(documents=[(kind, row) for row in rows], embedders=[target])
            last_id, done, outcome.batches = rows[-1].pk, done + len(rows), outcome.batches + 1
            rate = done / max(time.monotonic() - began, 1e-6)
            progress(
                f"{kind.name}: {done}/{total} ({100 * done / max(total, 1):.0f}%), "
                f"{rate:.0f} rows/s, about {(total - done) / max(rate, 1e-6):.0f} s left"
            )
    if max_batches is not None and outcome.batches >= max_batches:
        return outcome
    if target.model_name != LOCAL_MODEL_NAME:  # the bundled model's indexes are migrations'
        for kind in kinds():
            if not index_exists(shared_index_name(kind, target.model_name)):
                progress(f"building the HNSW index of {kind.name} for {target.model_name}")
                hnsw_index_create(kind, target.model_name, target.dimensions)
    vector_indexes_sync(progress=progress)  # large users' own, for this model too
    space.status = EmbeddingSpace.Status.READY
    space.completed_at = timezone.now()
    space.save(update_fields=["status", "completed_at"])
    outcome.complete = True
    return outcome
