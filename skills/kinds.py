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
    fusion="rrf",
    vector_weight=settings.EXPERIENCE_SEARCH_VECTOR_WEIGHT,
)


# A skill learned from many phrasings has a vector per this many of them besides their mean.
PHRASINGS_PER_PART = 5


def _skill_vectors(skill: Skill, chunk: Callable[[str], list[str]]) -> list[list[str]]:
    """A skill's vectors: what it says it does (name and description), and the centroid of
    the task phrasings it was learned from and of what its tools do (one vector for all of
    them: a new task of the kind is nearer their mean than most of them, as the MetaTool
    baselines measured; a tool's own description, one more phrasing, moved that mean toward
    new requests on the bench's dev half). From twice ``PHRASINGS_PER_PART`` phrasings on,
    each of ``len // PHRASINGS_PER_PART`` interleaved parts of them is a centroid too: the
    mean of many blurs the kinds of request among them (MetaTool's dev half at 20 per tool,
    p@1 0.767 → 0.776 offline; unchanged at 5)."""
    groups = [[piece] for piece in chunk(f"{skill.name}\n{skill.description}")]
    said = [text for text in (skill.tool_descriptions or {}).values() if text]
    triggers = [piece for trigger in skill.triggers for piece in chunk(trigger)]
    phrasings = [*triggers, *(piece for text in said for piece in chunk(text))]
    if not phrasings:
        return groups
    parts = len(triggers) // PHRASINGS_PER_PART
    subsets = [triggers[start::parts] for start in range(parts)] if parts > 1 else []
    return [*groups, phrasings, *subsets]


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
    # By scores, not ranks: a request names its tool's own terms often enough that BM25's
    # margin is worth keeping beside the similarity (MetaTool p@1 on the dev half 0.734 / 0.787
    # at 5 / 20 sessions per tool against 0.729 / 0.779 by RRF; SKILL_SEARCH_VECTOR_WEIGHT).
    fusion="scores",
    vector_weight=settings.SKILL_SEARCH_VECTOR_WEIGHT,
    calibration_pairs=Path(__file__).resolve().parent / "calibration" / "skill_pairs.json",
)


def skill_kinds_register() -> None:
    kind_register(EXPERIENCE_KIND)
    kind_register(SKILL_KIND)
