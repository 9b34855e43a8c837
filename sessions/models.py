"""The conversation store: sessions (chat or task) and their messages, in the order sent."""

from __future__ import annotations

from django.contrib.postgres.indexes import GinIndex
from django.db import models
from django.db.models import Q

from accounts.models import Owned
from images.models import ImageFetch, ImageObject


class Outcome(models.TextChoices):
    """How a piece of work went: a task session as its agent states it on closing, and an
    experience (``skills``, which reads the choices from here: sessions come first in the
    apps' order, so the one vocabulary lives where both can use it)."""

    SUCCESS = "success"
    FAILURE = "failure"
    PARTIAL = "partial"


class Session(Owned):
    """One conversation (``chat``) or one unit of agent work (``task``) of an end user, named by
    the caller's ``session_id``. Chat turns sent without a session_id go to the user's open
    default conversation (``session_id`` NULL), which is opened again after it closes."""

    class Tag(models.TextChoices):
        CHAT = "chat"
        TASK = "task"

    class Status(models.TextChoices):
        OPEN = "open"
        CLOSED = "closed"

    class CloseReason(models.TextChoices):
        EXPLICIT = "explicit"
        IDLE = "idle"
        SWEEPER = "sweeper"

    # NULL, not "": the default conversation has no caller id, and NULLs never collide in
    # the per-user uniqueness of session ids.
    session_id = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    tag = models.CharField(max_length=8, choices=Tag.choices, default=Tag.CHAT)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.OPEN)
    close_reason = models.CharField(max_length=16, choices=CloseReason.choices, blank=True)
    message_count = models.PositiveIntegerField(default=0)
    filter_tags = models.JSONField(default=dict, blank=True)
    # The tools the caller declared for the session (name → what the tool does): skills
    # learned from a task session say what their tools do from these.
    tools = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_activity_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)
    # How the work went and what the agent says of it, as stated when it closed the task
    # session (POST /sessions/{id}/close); NULL: not stated. The note is kept as written, as
    # turns are: what is derived from it (lessons) and what is served of it is redacted.
    outcome = models.CharField(  # noqa: DJ001
        max_length=8, choices=Outcome.choices, null=True, blank=True
    )
    note = models.TextField(null=True, blank=True)  # noqa: DJ001

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["client", "end_user", "session_id"],
                condition=Q(session_id__isnull=False),
                name="session_id_unique_per_client_user",
            ),
            models.UniqueConstraint(
                fields=["client", "end_user"],
                condition=Q(session_id__isnull=True, status="open"),
                name="one_open_default_session_per_client_user",
            ),
        ]
        indexes = [
            # The idle sweeper's scan: open sessions by last activity.
            models.Index(
                fields=["last_activity_at"],
                condition=Q(status="open"),
                name="session_open_activity",
            ),
        ]

    def __str__(self) -> str:
        return self.session_id or f"default conversation #{self.pk}"


MESSAGE_CLIENT_ID_UNIQUE = "message_client_message_id_unique"


class Message(Owned):
    """One turn as the caller sent it: role, content parts, tool calls. ``position`` orders the
    turns of a session across repeated adds.

    ``extraction``, ``extraction_attempts`` and ``extracted_at`` are the memory app's progress
    on the turn, kept on the turn so that it is pending from the insert that stores it and
    "what is left to extract" is one read of a partial index (``message_pending_by_user``).
    A chat turn starts ``pending`` (a task turn ``skipped``: it feeds skill learning, not
    memories). The extraction worker moves it to ``processed`` (at ``extracted_at``) in the
    transaction that stores its memories, or counts a failed run in ``extraction_attempts``
    and, past the worker's limit, marks it ``failed``, never to be taken again. This app owns
    the columns: the worker reads and advances them only through ``sessions.selectors`` and
    ``sessions.services``."""

    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"
        TOOL = "tool"
        SYSTEM = "system"

    class Extraction(models.TextChoices):
        PENDING = "pending"
        PROCESSED = "processed"
        SKIPPED = "skipped"  # task-session turns: kept for skill learning, not for memories
        FAILED = "failed"

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="messages")
    position = models.PositiveIntegerField()
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.JSONField(default=list, help_text="The content parts, as sent.")
    text = models.TextField(blank=True, help_text="The text parts joined: what extraction reads.")
    tool_calls = models.JSONField(null=True, blank=True)
    name = models.CharField(max_length=255, blank=True)
    tool_call_id = models.CharField(max_length=255, blank=True)
    filter_tags = models.JSONField(default=dict, blank=True)
    client_message_id = models.CharField(
        max_length=255,
        blank=True,
        default="",
        help_text="The turn's id in the client's own system: a turn sent again with it is "
        "stored once.",
    )
    occurred_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    extraction = models.CharField(
        max_length=12, choices=Extraction.choices, default=Extraction.PENDING
    )
    extraction_attempts = models.PositiveSmallIntegerField(default=0)
    extracted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["session_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["session", "position"], name="message_position_unique"),
            # A retry, a replayed queue, an import run twice: one row per turn the client named.
            models.UniqueConstraint(
                fields=["client", "end_user", "client_message_id"],
                condition=~Q(client_message_id=""),
                name=MESSAGE_CLIENT_ID_UNIQUE,
            ),
        ]
        indexes = [
            # Extraction claims and the re-queue job: a user's pending messages, oldest first.
            models.Index(
                fields=["end_user", "id"],
                condition=Q(extraction="pending"),
                name="message_pending_by_user",
            ),
            models.Index(
                fields=["created_at"], condition=Q(extraction="pending"), name="message_pending_age"
            ),
            GinIndex(
                fields=["filter_tags"], name="message_filter_tags", opclasses=["jsonb_path_ops"]
            ),
        ]

    def __str__(self) -> str:
        return f"{self.role} #{self.position} of session {self.session_id}"


class MessageImage(Owned):
    """An image a message carries, at ``part`` (its index among the message's content parts):
    the stored image once there is one and, for a remote URL, the fetch that brings it in.

    These rows are what keeps an image alive: when the last one naming an image goes (its
    message, session, user or organization deleted), the image is released
    (``images.services.images_release``, from this app's ``post_delete`` receiver)."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="images")
    part = models.PositiveSmallIntegerField()
    # RESTRICT, not PROTECT: deleting an organization takes its images and these links in one
    # cascade, which RESTRICT allows; deleting an image some message still shows is refused.
    image = models.ForeignKey(
        ImageObject, on_delete=models.RESTRICT, null=True, blank=True, related_name="+"
    )
    fetch = models.ForeignKey(
        ImageFetch, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["message_id", "part"]
        constraints = [
            models.UniqueConstraint(fields=["message", "part"], name="message_image_part_unique"),
        ]

    def __str__(self) -> str:
        return f"image of message #{self.message_id}, part {self.part}"
