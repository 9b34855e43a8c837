"""Skills app models, one module per concern, re-exported here: experiences and what is made
of them (``experiences``), learning runs (``learning``), skills and their versions (``skills``)."""

from __future__ import annotations

from skills.models.experiences import (
    CURRENT,
    EXPERIENCE_REFERENCES,
    LESSONS_WAITING,
    OUTCOME_SCORES,
    ActionGroupingCalibration,
    ActionPhrase,
    Experience,
    ExperienceEmbedding,
    ExperienceSettings,
    LessonStatus,
    LessonType,
    Origin,
    Outcome,
    Recommendation,
    Signal,
)
from skills.models.learning import (
    LearningRun,
    LearningRunSession,
)
from skills.models.skills import (
    Skill,
    SkillEmbedding,
    SkillPhrasing,
    SkillProposal,
    SkillUse,
    SkillVersion,
)

__all__ = [
    "CURRENT",
    "EXPERIENCE_REFERENCES",
    "LESSONS_WAITING",
    "OUTCOME_SCORES",
    "ActionGroupingCalibration",
    "ActionPhrase",
    "Experience",
    "ExperienceEmbedding",
    "ExperienceSettings",
    "LearningRun",
    "LearningRunSession",
    "LessonStatus",
    "LessonType",
    "Origin",
    "Outcome",
    "Recommendation",
    "Signal",
    "Skill",
    "SkillEmbedding",
    "SkillPhrasing",
    "SkillProposal",
    "SkillUse",
    "SkillVersion",
]
