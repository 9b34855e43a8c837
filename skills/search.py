"""The skills app's searchable kinds: what the retrieval engine searches of it."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from mirix_site.search.kinds import SearchableKind, kind_register
from skills.lifecycle import SERVED
from skills.models import (
    CURRENT,
    Experience,
    ExperienceEmbedding,
    Skill,
    SkillEmbedding,
)
from skills.phrasing_lane import skill_phrasings_rescore
from skills.prototypes import skill_vectors_write

# Codes are the kinds' numbers in the search index: never change or reuse one.
EXPERIENCE_KIND = SearchableKind(
    name="experience",
    code=20,
    model=Experience,
    embedding_model=ExperienceEmbedding,
    text_fields=("task", "action", "reason"),
    time_field="occurred_at",
    current=CURRENT,
    fusion="rrf",
    vector_weight=settings.EXPERIENCE_SEARCH_VECTOR_WEIGHT,
)


SKILL_KIND = SearchableKind(
    name="skill",
    code=21,
    model=Skill,
    embedding_model=SkillEmbedding,
    text_fields=("name", "description", "triggers", "instructions"),
    current=SERVED,
    tags_field=None,
    # A prototype per skill, fit against the owner's other skills (skills.prototypes).
    vectors_write=skill_vectors_write,
    # By scores, not ranks: a request names its tool's own terms often enough that BM25's
    # margin is worth keeping beside the similarity (MetaTool p@1 on the dev half 0.734 / 0.787
    # at 5 / 20 sessions per tool against 0.729 / 0.779 by RRF; SKILL_SEARCH_VECTOR_WEIGHT).
    fusion="scores",
    vector_weight=settings.SKILL_SEARCH_VECTOR_WEIGHT,
    # Each candidate's learned requests matched one by one: the keyword floor of what it was
    # learned from (skills.phrasing_lane).
    rescore=skill_phrasings_rescore,
    calibration_pairs=Path(__file__).resolve().parent / "calibration" / "skill_pairs.json",
)


def skill_kinds_register() -> None:
    kind_register(EXPERIENCE_KIND)
    kind_register(SKILL_KIND)
