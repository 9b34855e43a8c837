from __future__ import annotations

from django.apps import AppConfig


class NotesConfig(AppConfig):
    name = "tests.notes"
    label = "notes"
    verbose_name = "Notes (test kind)"

    def ready(self) -> None:
        from accounts.portability import portable_skip
        from mirix_site.search.kinds import kind_register
        from tests.notes.models import NOTE_KIND

        kind_register(NOTE_KIND)
        portable_skip(NOTE_KIND.model, "A test kind of the search engine, never exported.")
        portable_skip(NOTE_KIND.embedding_model, "Vectors of the test kind.")
