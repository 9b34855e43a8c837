"""Which embedding models searches read and writes fill, while a re-embed is under way.

The configured provider (``EMBEDDING_*`` settings) is the target. Searches read it once its
space is ready (or when no space was ever recorded: a fresh install's only model); until then
they read the last ready model, so switching models never serves half-filled vectors. New
rows are embedded with both while they differ, so neither space falls behind.
"""

from __future__ import annotations

from django.conf import settings

from mirix_site.common.rowsmemo import rows_memo
from mirix_site.providers.embeddings import (
    EmbeddingProvider,
    EmbeddingSettings,
    embedding_provider,
    embedding_provider_from_settings,
)
from mirix_site.search.models import EmbeddingSpace


def _provider_of(space: EmbeddingSpace) -> EmbeddingProvider:
    same_provider = space.provider == settings.EMBEDDING_PROVIDER
    return embedding_provider(
        EmbeddingSettings(
            provider=space.provider,
            model=space.model,
            api_base=space.api_base or None,
            api_key=settings.EMBEDDING_API_KEY if same_provider else None,
            dimensions=space.dimensions,
        )
    )


@rows_memo(EmbeddingSpace)
def read_embedder() -> EmbeddingProvider:
    configured = embedding_provider_from_settings()
    spaces = {space.model: space for space in EmbeddingSpace.objects.all()}
    own = spaces.get(configured.model_name)
    if not spaces or own is None or own.status == EmbeddingSpace.Status.READY:
        return configured
    ready = [space for space in spaces.values() if space.status == EmbeddingSpace.Status.READY]
    if not ready:
        return configured
    latest = max(ready, key=lambda space: space.completed_at or space.created_at)
    return _provider_of(latest)


def write_embedders() -> list[EmbeddingProvider]:
    configured = embedding_provider_from_settings()
    reading = read_embedder()
    if reading.model_name == configured.model_name:
        return [configured]
    return [configured, reading]
