from __future__ import annotations

from django.db import models
from django.db.models import Q

from accounts.models import Owned
from mirix_site.search.kinds import SearchableKind
from mirix_site.search.models import Embedding


class Note(Owned):
    """A note an end user wrote: a title and a body, tags, when it was written; an archived
    note is kept but not current."""

    title = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    tags = models.JSONField(default=dict, blank=True)
    written_at = models.DateTimeField()
    archived = models.BooleanField(default=False)

    def __str__(self) -> str:
        return self.title


class NoteEmbedding(Embedding):
    """Embeddings of notes, per model and chunk."""

    note = models.ForeignKey(Note, on_delete=models.CASCADE, related_name="embeddings")


NOTE_KIND = SearchableKind(
    name="note",
    code=901,
    model=Note,
    embedding_model=NoteEmbedding,
    text_fields=("title", "body"),
    time_field="written_at",
    current=Q(archived=False),
    tags_field="tags",
)
