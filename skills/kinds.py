"""The skills app's searchable kinds: what the retrieval engine searches of it."""

from __future__ import annotations

from django.conf import settings

from memory.retrieval.kinds import SearchableKind, kind_register
from skills.models import CURRENT, Experience, ExperienceEmbedding

# Codes are the kinds' numbers in the search index: never change or reuse one.
EXPERIENCE_KIND = SearchableKind(
    name="experience",
    code=20,
    model=Experience,
    embedding_model=ExperienceEmbedding,
    text_fields=("task", "action", "reason"),
    time_field="occurred_at",
    current=CURRENT,
    vector_weight=settings.EXPERIENCE_SEARCH_VECTOR_WEIGHT,
)


def skill_kinds_register() -> None:
    kind_register(EXPERIENCE_KIND)
