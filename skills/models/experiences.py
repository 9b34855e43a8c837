"""Experiences (what was tried for a task, and how it went), the phrasings of their actions and
the groups of equivalent ones, the recommendations made from them, and the client's settings.
Experiences are a searchable kind of the retrieval engine (``skills.search``); the lessons a
learning run distills are experiences too."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.db import models
from django.db.models import Q
from pgvector.django import VectorField

from accounts.models import Client, Organization, Owned, OwnedIndexedByModel
from mirix_site.common.history import history_tracked
from mirix_site.search.models import Embedding
from sessions.models import Outcome

# The score an outcome implies when the caller gives none.
OUTCOME_SCORES = {Outcome.SUCCESS: 1.0, Outcome.PARTIAL: 0.5, Outcome.FAILURE: 0.0}


class Origin(models.TextChoices):
    API = "api"  # recorded by a caller
    CONVERSATION = "conversation"  # distilled from a finished transcript sent to the API
    DISTILLED = "distilled"  # distilled from a task session by a learning run


class LessonType(models.TextChoices):
    LEARN = "learn"  # do this
    AVOID = "avoid"  # do not do this


class Signal(models.TextChoices):
    """What a distilled lesson rests on."""

    TOOL_ERROR = "tool_error"
    USER_CRITIQUE = "user_critique"
    USER_CONFIRMATION = "user_confirmation"
    SELF_CORRECTION = "self_correction"
    INFERRED = "inferred"


class LessonStatus(models.TextChoices):
    PENDING = "pending"  # distilled, not yet read by a curator
    CONSUMED = "consumed"  # a curator placed it (in a skill, or decided it changes none)
    POOLED = "pooled"  # waits for a later run (no room in this one's batches or budget)
    SUPERSEDED = "superseded"  # replaced before a curator read it


# The lessons a curator has yet to place: new ones, and those earlier runs pooled.
LESSONS_WAITING = (LessonStatus.PENDING, LessonStatus.POOLED)


# What "current" means for an experience: not replaced by a newer one. Recall and recommend
# read current experiences unless asked for the superseded too.
CURRENT = Q(superseded_by__isnull=True)


class Recommendation(Owned):
    """An action recommended for a task, with the confidence and evidence it was given with.
    Experiences recorded with its id are the outcomes of following it: how often those
    succeeded per confidence band is the calibration a user can check."""

    task = models.TextField()
    action = models.TextField()
    action_key = models.TextField(help_text="The group of phrasings the action stands for.")
    confidence = models.FloatField()
    successes = models.PositiveIntegerField()
    failures = models.PositiveIntegerField()
    partials = models.PositiveIntegerField()
    supporting_experience_ids = ArrayField(models.BigIntegerField(), default=list)
    runners_up = models.JSONField(default=list, blank=True)
    explore = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["end_user", "client", "-created_at"], name="recommendation_owner"),
            # The dashboard's roll-up: every tenant's recommendations of a few days.
            models.Index(fields=["created_at"], name="recommendation_created"),
        ]

    def __str__(self) -> str:
        return f"{self.action} ({self.confidence:.2f})"


# Experience's nullable references: a deletion of what they name looks them up (SET_NULL).
EXPERIENCE_REFERENCES = (
    "source_session",
    "superseded_by",
    "recommendation",
    "distilled_by",
    "consumed_by",
)


@history_tracked(
    "task",
    "action",
    "outcome",
    "score",
    "reason",
    "title",
    "content",
    "lesson_type",
    "evidence",
    "status",
    "pool_reason",
    "superseded_by",
    "consumed_by",
    "occurred_at",
)
class Experience(OwnedIndexedByModel):
    """One attempt at a task: the action taken, its outcome and score, why it failed, the
    context it ran in, where it came from, when it happened, and what replaced it.

    Recorded by the thousand, so every index is one its reads or deletions use: plain ones on
    the organization and the client, none on the user (the composite ones lead with it), and
    indexes of the nullable references over the rows that have one: each unused index cost
    every batch record database time (bench/RESULTS.md, bench/experiences.py)."""

    task = models.TextField()
    action = models.TextField()
    action_key = models.TextField(
        editable=False, help_text="The action's normalized text (its phrasing's key)."
    )
    outcome = models.CharField(max_length=7, choices=Outcome.choices)
    score = models.FloatField()
    reason = models.TextField(blank=True, help_text="Why it failed (or fell short).")
    context = models.JSONField(default=dict, blank=True)
    filter_tags = models.JSONField(default=dict, blank=True)
    origin = models.CharField(max_length=12, choices=Origin.choices, default=Origin.API)
    source_session = models.ForeignKey(
        "conversations.Session",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    source_message_ids = ArrayField(models.BigIntegerField(), default=list, blank=True)
    # A transcript's digest (origin conversation): sending it again replaces this experience.
    transcript_digest = models.CharField(max_length=64, blank=True, default="", editable=False)
    superseded_by = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="supersedes",
        db_index=False,
    )
    superseded_at = models.DateTimeField(null=True, blank=True)
    recommendation = models.ForeignKey(
        Recommendation,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="outcomes",
        help_text="The recommendation this is the outcome of following.",
        db_index=False,
    )
    occurred_at = models.DateTimeField()
    # What a distilled lesson adds (origin distilled; blank for experiences callers record).
    title = models.CharField(max_length=200, blank=True)
    content = models.TextField(blank=True)
    lesson_type = models.CharField(max_length=5, choices=LessonType.choices, blank=True)
    evidence = models.TextField(blank=True, help_text="The quote the lesson rests on.")
    signal = models.CharField(max_length=17, choices=Signal.choices, blank=True)
    importance = models.FloatField(null=True, blank=True)
    credibility = models.FloatField(null=True, blank=True)
    status = models.CharField(
        max_length=10,
        choices=LessonStatus.choices,
        blank=True,
        help_text="Where the curator is with the lesson (blank: not a lesson).",
    )
    pool_reason = models.TextField(blank=True, help_text="Why a pooled lesson waits.")
    distilled_by = models.ForeignKey(
        "LearningRun",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="lessons",
        db_index=False,
    )
    consumed_by = models.ForeignKey(
        "LearningRun",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="consumed",
        db_index=False,
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["end_user", "client", "-created_at"], name="experience_owner"),
            # The curator's scan: a user's lessons waiting for a skill.
            models.Index(
                fields=["client", "end_user", "status"],
                condition=Q(status__in=["pending", "pooled"]),
                name="experience_lessons_waiting",
            ),
            models.Index(fields=["end_user", "client", "action_key"], name="experience_action"),
            GinIndex(fields=["context"], name="experience_context", opclasses=["jsonb_path_ops"]),
            GinIndex(fields=["filter_tags"], name="experience_tags", opclasses=["jsonb_path_ops"]),
            models.Index(fields=["organization"], name="experience_organization"),
            models.Index(fields=["client"], name="experience_client"),
            *(
                models.Index(
                    fields=[reference],
                    condition=Q(**{f"{reference}__isnull": False}),
                    name=f"experience_{reference}",
                )
                for reference in EXPERIENCE_REFERENCES
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["end_user", "client", "transcript_digest"],
                condition=~Q(transcript_digest=""),
                name="experience_transcript_unique",
            ),
            models.CheckConstraint(
                condition=Q(score__gte=0.0, score__lte=1.0), name="experience_score_range"
            ),
            models.CheckConstraint(
                condition=~Q(superseded_by=models.F("id")), name="experience_not_self_superseded"
            ),
            models.CheckConstraint(
                condition=Q(importance__isnull=True)
                | Q(
                    importance__gte=0.0,
                    importance__lte=1.0,
                    credibility__gte=0.0,
                    credibility__lte=1.0,
                ),
                name="experience_lesson_scores_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task[:60]} -> {self.action[:60]} ({self.outcome})"


class ExperienceEmbedding(Embedding):
    """Embeddings of experiences, per model and chunk (written by the worker after the
    experience is stored: BM25 finds it at once, the vector lane once this row exists)."""

    experience = models.ForeignKey(Experience, on_delete=models.CASCADE, related_name="embeddings")


@history_tracked("group_key", "apart_from")
class ActionPhrase(Owned):
    """One way a user's experiences phrase an action (its normalized text, ``key``), and the
    group of equivalent phrasings it joined (``group_key``: the key of one of the group's
    phrasings, its first unless an operator merged or split it). A phrasing joins a group
    by the rule of ``skills.services.grouping``, or starts its own; an operator merges two
    groups or splits a phrasing out, and the phrasings a split held apart (``apart_from``)
    keep the rule from joining a new phrasing across it."""

    key = models.TextField()
    text = models.TextField(blank=True, help_text="The phrasing as first recorded.")
    group_key = models.TextField()
    model = models.CharField(max_length=100, blank=True, help_text="Blank: grouped by text only.")
    embedding = VectorField(null=True, blank=True)
    similarity = models.FloatField(
        null=True, blank=True, help_text="To the group's first phrasing, when it joined one."
    )
    apart_from = ArrayField(
        models.TextField(),
        default=list,
        blank=True,
        help_text="Keys of the phrasings an operator split it from: not one action with it.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["end_user", "client", "key"], name="action_phrase_unique"
            ),
        ]

    def __str__(self) -> str:
        return self.key if self.key == self.group_key else f"{self.key} = {self.group_key}"


class ExperienceSettings(models.Model):
    """A client's defaults for recall and recommend: the half-life that discounts older
    experiences when a request names none (None: every experience weighs the same)."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    client = models.OneToOneField(
        Client, on_delete=models.CASCADE, related_name="experience_settings"
    )
    half_life_days = models.FloatField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "experience settings"
        verbose_name_plural = "experience settings"

    def __str__(self) -> str:
        return f"{self.client_id}: half-life {self.half_life_days}"


class ActionGroupingCalibration(models.Model):
    """For one embedding model: the cosine similarity from which two phrasings of an action
    are one action, measured on pairs of phrasings that are and are not the same action
    (``skills/calibration/action_pairs.json``) by ``manage.py calibrate_action_grouping``."""

    model = models.CharField(max_length=100, unique=True)
    threshold = models.FloatField()
    guarded_threshold = models.FloatField(
        null=True, help_text="From here when no content word is left unmatched (None: threshold)."
    )
    same_pairs = models.PositiveIntegerField()
    different_pairs = models.PositiveIntegerField()
    same_mean = models.FloatField()
    different_max = models.FloatField()
    same_above = models.FloatField(help_text="The share of same pairs the rule joins.")
    different_apart = models.FloatField(
        null=True, help_text="The share of different pairs the rule keeps apart."
    )
    measured_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.model}: {self.threshold:.3f}"
