"""The skills app's searchable kinds: what the retrieval engine searches of it."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db.models import Q

from memory.retrieval.kinds import SearchableKind, kind_register
from skills.models import CURRENT, Experience, ExperienceEmbedding, Skill, SkillEmbedding

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

# Skills served: candidates and active ones (deprecated and deleted ones are kept, not found).
SERVED = Q(status__in=[Skill.Status.CANDIDATE, Skill.Status.ACTIVE])

SKILL_KIND = SearchableKind(
    name="skill",
    code=21,
    model=Skill,
    embedding_model=SkillEmbedding,
    text_fields=("name", "description", "triggers", "instructions"),
    current=SERVED,
    tags_field=None,
    calibration_pairs=Path(__file__).resolve().parent / "calibration" / "skill_pairs.json",
)


def skill_kinds_register() -> None:
    kind_register(EXPERIENCE_KIND)
    kind_register(SKILL_KIND)
