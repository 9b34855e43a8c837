from __future__ import annotations

from django.db import models
from django.db.models import Q

from accounts.models import Owned


class ExtractionJob(Owned):
    """One batch of a user's new chat messages to turn into memories. At most one job per
    (client, user) waits in ``queued``; new messages join it. The worker claims it with a
    conditional update (``queued → running``) and takes every pending message of that user."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    attempts = models.PositiveSmallIntegerField(default=0)
    message_count = models.PositiveIntegerField(default=0)
    memory_counts = models.JSONField(default=dict, blank=True)
    llm_calls = models.PositiveSmallIntegerField(default=0)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["client", "end_user"],
                condition=Q(status="queued"),
                name="one_queued_extraction_job_per_user",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "created_at"], name="extraction_job_status"),
            # When each organization was last served (max started_at), the fair claim's order:
            # 25 ms instead of 0.9 s a claim with 20,000 queued, 200,000 finished jobs.
            models.Index(fields=["organization", "started_at"], name="extraction_job_served"),
        ]

    def __str__(self) -> str:
        return f"extraction #{self.pk} ({self.status})"


class DreamRun(Owned):
    """One auto-dream of a user's memories (``memory.services.dreams``): asked for through
    ``POST /memory/auto_dream`` (run at once) or queued by the beat job once the user has
    ``AUTO_DREAM_AFTER_NEW_MEMORIES`` memories newer than their last dream. At most one run of a
    user waits queued and one runs at a time (the constraints); ``report`` holds what it did
    per type. A user's last run, whatever its state, is where the next count of new memories
    starts."""

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    class Trigger(models.TextChoices):
        REQUEST = "request"  # POST /memory/auto_dream
        THRESHOLD = "threshold"  # AUTO_DREAM_AFTER_NEW_MEMORIES new memories

    state = models.CharField(max_length=12, choices=State.choices, default=State.QUEUED)
    trigger = models.CharField(max_length=12, choices=Trigger.choices)
    mode = models.CharField(max_length=32)
    report = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["client", "end_user"],
                condition=Q(state="queued"),
                name="one_queued_dream_run_per_user",
            ),
            models.UniqueConstraint(
                fields=["client", "end_user"],
                condition=Q(state="running"),
                name="one_running_dream_run_per_user",
            ),
        ]
        indexes = [
            models.Index(fields=["end_user", "client", "-created_at"], name="dream_run_owner"),
        ]

    def __str__(self) -> str:
        return f"{self.state} dream run #{self.pk}"


class MemoryImport(models.Model):
    """A bulk import (``POST /memory/import``, ``manage.py import_user`` on a file of turns)
    under the id its client gives it: what its requests read, stored, found stored before and
    refused (with the line and the reason), updated as each batch commits, so that an operator
    watches it progress. A request naming the import again continues it: the turns carry their
    own ids (``Message.client_message_id``), so lines sent again are found, not stored twice,
    and an import cut off is resumed by sending its file again."""

    class State(models.TextChoices):
        RUNNING = "running"  # a request is reading lines into it
        IDLE = "idle"  # between requests, or done

    organization = models.ForeignKey(
        "accounts.Organization", on_delete=models.CASCADE, related_name="+"
    )
    client = models.ForeignKey("accounts.Client", on_delete=models.CASCADE, related_name="+")
    import_id = models.CharField(max_length=255)
    state = models.CharField(max_length=12, choices=State.choices, default=State.RUNNING)
    requests = models.PositiveIntegerField(default=0)
    expected_lines = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="as the client announced it: what the ETA is of"
    )
    turns_stored = models.PositiveBigIntegerField(default=0)
    turns_found = models.PositiveBigIntegerField(
        default=0, help_text="turns stored before (by an earlier request or import), not again"
    )
    memories_stored = models.PositiveBigIntegerField(default=0)
    memories_found = models.PositiveBigIntegerField(
        default=0, help_text="memories stored before (the same id, or type and fields), not again"
    )
    lines_refused = models.PositiveBigIntegerField(default=0)
    refusals = models.JSONField(
        default=list,
        blank=True,
        help_text="the first refused lines: {request, line, errors}",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["client", "import_id"], name="memory_import_id_unique")
        ]

    def __str__(self) -> str:
        return f"import {self.import_id} ({self.state})"

    @property
    def lines_read(self) -> int:
        """Every line read ends as a turn or memory stored or found, or a refusal."""
        return (
            self.turns_stored
            + self.turns_found
            + self.memories_stored
            + self.memories_found
            + self.lines_refused
        )

    @property
    def eta_seconds(self) -> float | None:
        """Seconds left to ``expected_lines`` at the rate so far; None when no total was
        announced, it is reached, or nothing was read yet."""
        if self.expected_lines is None or not self.lines_read:
            return None
        left = self.expected_lines - self.lines_read
        spent = (self.updated_at - self.created_at).total_seconds()
        if left <= 0 or spent <= 0:
            return None
        return round(left * spent / self.lines_read, 1)
