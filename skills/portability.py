"""The skills app's rows in an end user's export (``accounts.portability``): experiences (with
their outcome, the session and turns they came from, and what superseded them), skills and
every version of each (with the experiences behind it). An import redacts them as their own
writes do, indexes them for BM25 and embeds them with the calls the worker makes
(``experiences_embed``, ``skills_embed``), so recall, recommend and skill retrieval find them
as they find rows written here.

Learning runs, recommendations, proposals waiting for an operator and skill uses are this
install's own work; an experience's or a version's link to them is left out (the counts a
skill's uses added travel in the skill)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core.exceptions import ValidationError

from accounts.portability import (
    ImportRun,
    PortableKind,
    model_columns,
    portable_kind_register,
    portable_skip,
)
from mirix_site.search.index import documents_index
from mirix_site.search.spaces import write_embedders
from skills.content import SkillContent
from skills.embedding_queue import experiences_embed
from skills.models import (
    ActionPhrase,
    Experience,
    ExperienceEmbedding,
    LearningRun,
    LearningRunSession,
    Recommendation,
    Skill,
    SkillEmbedding,
    SkillPhrasing,
    SkillProposal,
    SkillUse,
    SkillVersion,
)
from skills.search import EXPERIENCE_KIND, SKILL_KIND
from skills.services.experiences import experience_redacted
from skills.services.skills import skills_embed

# Rows indexed and embedded per call.
INDEX_BATCH = 200


def _experience_prepare(row: Experience, record: dict[str, Any], run: ImportRun) -> None:
    experience_redacted(row)


def _experiences_finish(row_ids: Sequence[int], run: ImportRun) -> None:
    embedders = write_embedders()
    for start in range(0, len(row_ids), INDEX_BATCH):
        batch = list(row_ids[start : start + INDEX_BATCH])
        rows = Experience.objects.filter(pk__in=batch).order_by("pk")
        documents_index(documents=[(EXPERIENCE_KIND, row) for row in rows], embedders=[])
        experiences_embed(experience_ids=batch, embedders=embedders)


EXPERIENCE = PortableKind(
    name="experience",
    position=50,
    model=Experience,
    fields=model_columns(Experience, without=["source_message_ids", "action_key"]),
    links={"source_session": "session"},
    later_links={"superseded_by": "experience"},
    id_lists={"source_message_ids": "message"},
    prepare=_experience_prepare,
    finish=_experiences_finish,
)


def _skill_prepare(row: Skill, record: dict[str, Any], run: ImportRun) -> None:
    content = SkillContent.of(row)
    errors = content.errors()
    if errors:
        raise ValidationError(errors)
    redacted = content.redacted()
    row.description, row.instructions = redacted.description, redacted.instructions
    row.triggers, row.pitfalls = list(redacted.triggers), list(redacted.pitfalls)


def _skills_finish(row_ids: Sequence[int], run: ImportRun) -> None:
    rows = list(Skill.objects.filter(pk__in=row_ids).order_by("pk"))
    documents_index(documents=[(SKILL_KIND, row) for row in rows], embedders=[])
    # Once all are in: a skill's vector is fit against its owner's other skills.
    skills_embed(skill_ids=list(row_ids), embedders=write_embedders())


SKILL = PortableKind(
    name="skill",
    position=60,
    model=Skill,
    fields=model_columns(Skill),
    prepare=_skill_prepare,
    finish=_skills_finish,
)


def _version_prepare(row: SkillVersion, record: dict[str, Any], run: ImportRun) -> None:
    try:
        content = SkillContent.from_snapshot(row.snapshot)
    except (KeyError, TypeError, AttributeError):
        raise ValidationError(
            {"snapshot": ["A skill's content: name, description, triggers, ..."]}
        ) from None
    row.snapshot = content.redacted().snapshot()


SKILL_VERSION = PortableKind(
    name="skill_version",
    position=61,
    model=SkillVersion,
    # A run's operation key is this install's (unique across it).
    fields=model_columns(SkillVersion, without=["experience_ids", "operation_key"]),
    links={"skill": "skill"},
    id_lists={"experience_ids": "experience"},
    prepare=_version_prepare,
)


def skills_portable_register() -> None:
    for kind in (EXPERIENCE, SKILL, SKILL_VERSION):
        portable_kind_register(kind)
    vectors = "Vectors: an import embeds the rows again."
    for model in (ExperienceEmbedding, SkillEmbedding, SkillPhrasing, ActionPhrase):
        portable_skip(model, vectors)
    portable_skip(Recommendation, "An answer this install gave; experiences travel without it.")
    portable_skip(LearningRun, "This install's learning work; what it wrote travels.")
    portable_skip(LearningRunSession, "This install's learning work; what it wrote travels.")
    portable_skip(SkillProposal, "A change waiting for this install's operator.")
    portable_skip(SkillUse, "Counted in its skill's successes and failures, which travel.")
