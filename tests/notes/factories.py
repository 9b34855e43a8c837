"""Notes written and indexed as an app of the engine's would: rows, then the index writer."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from accounts.models import EndUser
from mirix_site.providers.embeddings import embedding_provider_from_settings
from mirix_site.search.index import documents_index
from tests.factories import TenantFixture
from tests.notes.models import NOTE_KIND, Note

WRITTEN = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def notes_create(
    owner: TenantFixture, user: EndUser, items: list[tuple[str, str]], **fields: Any
) -> list[Note]:
    """One note per (title, body), written by ``owner``'s client about ``user`` and indexed
    with the configured embedding model; ``written_at`` and ``tags`` apply to them all."""
    rows = Note.objects.bulk_create(
        [
            Note(
                organization=owner.organization,
                client=owner.client,
                end_user=user,
                title=title,
                body=body,
                written_at=fields.get("written_at", WRITTEN),
                tags=fields.get("tags", {}),
            )
            for title, body in items
        ]
    )
    documents_index(
        documents=[(NOTE_KIND, row) for row in rows],
        embedders=[embedding_provider_from_settings()],
    )
    return rows
