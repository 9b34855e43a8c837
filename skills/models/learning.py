"""Learning runs: the durable passes that learn from closed task sessions (``skills.learning``),
and the sessions each one took."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from accounts.models import Owned
from skills.models.experiences import Outcome


class LearningRun(Owned):
    """One pass of skill learning over some closed task sessions of a user: the distiller turns
    them into experiences, the curator those into skill versions. Durable: ``queued``, then
    claimed (``running``, its ``heartbeat_at`` kept fresh by the worker that holds it), then one
    of the final states. At most one run of a user waits queued at a time (the constraint that
    makes concurrent session closes queue one run); the sessions it learns from are its
    ``LearningRunSession`` rows, each session learned by one run."""

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CONTEXT_LIMIT = "context_limit"
        BUDGET_EXHAUSTED = "budget_exhausted"

    class Trigger(models.TextChoices):
        THRESHOLD = "threshold"  # SKILL_TRIGGER_SESSION_THRESHOLD closed task sessions
        REQUEST = "request"  # POST /learning-runs
        AUTO_DREAM = "auto_dream"  # POST /memory/auto_dream mode=procedural

    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    trigger = models.CharField(max_length=12, choices=Trigger.choices)
    attempts = models.PositiveSmallIntegerField(default=0)
    steps = models.PositiveIntegerField(default=0)
    llm_calls = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    skills_created = models.PositiveIntegerField(default=0)
    skills_edited = models.PositiveIntegerField(default=0)
    skills_merged = models.PositiveIntegerField(default=0)
    skills_deprecated = models.PositiveIntegerField(default=0)
    experiences_distilled = models.PositiveIntegerField(default=0)
    experiences_consumed = models.PositiveIntegerField(default=0)
    experiences_pooled = models.PositiveIntegerField(default=0)
    warnings = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["client", "end_user"],
                condition=Q(state="queued"),
                name="one_queued_learning_run_per_user",
            ),
            # Runs of one user never overlap: a claim while another runs is refused.
            models.UniqueConstraint(
                fields=["client", "end_user"],
                condition=Q(state="running"),
                name="one_running_learning_run_per_user",
            ),
        ]
        indexes = [
            models.Index(fields=["end_user", "client", "-created_at"], name="learning_run_owner"),
            # The recovery job's scan: runs whose worker stopped beating.
            models.Index(
                fields=["heartbeat_at"], condition=Q(state="running"), name="learning_run_beat"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.state} learning run #{self.pk}"


class LearningRunSession(Owned):
    """A task session a learning run learns from. A session is learned once: the row, not a
    column on the session, says it was (the sessions app knows nothing of learning)."""

    run = models.ForeignKey(LearningRun, on_delete=models.CASCADE, related_name="session_links")
    session = models.OneToOneField(
        "conversations.Session", on_delete=models.CASCADE, related_name="+"
    )
    # Set in the transaction that records the session's lessons: a session is distilled once,
    # however often its run is claimed again.
    distilled_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=7, choices=Outcome.choices, blank=True)

    class Meta:
        ordering = ["run_id", "session_id"]

    def __str__(self) -> str:
        return f"session {self.session_id} of run {self.run_id}"
