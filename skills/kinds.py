"""The skills app's searchable kinds: what the retrieval engine searches of it."""

from __future__ import annotations

from collections.abc import Callable
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


def _skill_vectors(skill: Skill, chunk: Callable[[str], list[str]]) -> list[list[str]]:
    """A skill's vectors: what it says it does (name and description), and the centroid of
    the task phrasings it was learned from and of what its tools do (one vector for all of
    them: a new task of the kind is nearer their mean than most of them, as the MetaTool
    baselines measured; a tool's own description, one more phrasing, moved that mean toward
    new requests on the bench's dev half)."""
    groups = [[piece] for piece in chunk(f"{skill.name}\n{skill.description}")]
    said = [text for text in (skill.tool_descriptions or {}).values() if text]
    phrasings = [piece for text in [*skill.triggers, *said] for piece in chunk(text)]
    return [*groups, phrasings] if phrasings else groups


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
    embedding_groups=_skill_vectors,
    vector_weight=settings.SKILL_SEARCH_VECTOR_WEIGHT,
    calibration_pairs=Path(__file__).resolve().parent / "calibration" / "skill_pairs.json",
)


def skill_kinds_register() -> None:
    kind_register(EXPERIENCE_KIND)
    kind_register(SKILL_KIND)
