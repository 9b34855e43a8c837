from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from mirix_site.api.fields import IntegerField, TextChoiceField, TextField, UserIdField
from sessions.content import message_schema
from sessions.models import Message, MessageImage, Outcome, Session
from sessions.selectors import session_name
from sessions.sensitive import MASK, sensitive_redacted, sensitive_redacted_json

MESSAGE_ROLES = tuple(role.value for role in Message.Role)
# What an agent says of its task on closing it: a paragraph, as an experience's reason is.
MAX_NOTE_CHARS = 4000


@extend_schema_field(message_schema(roles=MESSAGE_ROLES))
class MessageInputField(serializers.JSONField):
    """One turn as a caller sends it, in a list of them; the list is checked whole
    (``sessions.content.message_normalize``), so that errors name the turn's index."""


class SessionSerializer(serializers.Serializer):
    """A session. Sensitive values in its note (``sessions.sensitive``) are masked unless the
    context's ``secrets_of`` (``Tenant.secrets_of``) names the client that wrote it, as its
    turns' are."""

    id = TextField(source="pk")
    session_id = TextField(
        allow_null=True, help_text="the caller's id; null: the default conversation"
    )
    name = serializers.SerializerMethodField(
        help_text="what /sessions/{session_id} reads take: the caller's id, or for the user's "
        "default conversation (turns sent without one) default.<number>"
    )
    user_id = TextField(source="end_user.user_id")
    client_id = TextField()
    tag = TextField()
    status = TextField()
    close_reason = TextField(allow_blank=True)
    message_count = IntegerField()
    filter_tags = serializers.DictField()
    tools = serializers.DictField(
        child=TextField(allow_blank=True), help_text="the tools declared: name → description"
    )
    created_at = serializers.DateTimeField()
    last_activity_at = serializers.DateTimeField()
    closed_at = serializers.DateTimeField(allow_null=True)
    outcome = TextChoiceField(
        choices=Outcome.values,
        allow_null=True,
        help_text="how the task went, as stated when the session was closed; null: not stated",
    )
    note = TextField(
        allow_null=True, help_text="what the closer said of how it went; null: nothing"
    )

    def get_name(self, session: Session) -> str:
        return session_name(session)

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data = super().to_representation(instance)
        if data["note"] and self.context.get("secrets_of") != instance.client_id:
            data["note"] = sensitive_redacted(data["note"], mask=MASK)
        return data


class MessageImageSerializer(serializers.Serializer):
    """An image of a turn: the content part showing it, its id once stored, and for a remote
    URL its fetch's state (``pending``, ``stored``, ``failed`` with the reason)."""

    part = IntegerField()
    image_id = TextField(source="image.sha256", allow_null=True, default=None)
    status = serializers.SerializerMethodField()
    reason = serializers.SerializerMethodField()

    def get_status(self, link: MessageImage) -> str:
        if link.fetch is not None:
            return link.fetch.status
        return "stored" if link.image_id is not None else "pending"

    def get_reason(self, link: MessageImage) -> str:
        return link.fetch.reason if link.fetch is not None else ""


class MessageSerializer(serializers.Serializer):
    """A turn as it was sent, with the id that memories cite as provenance. Sensitive values
    in its text and tool calls (``sessions.sensitive``) are masked unless the context's
    ``secrets_of`` (``Tenant.secrets_of``) names the client that wrote it."""

    id = TextField(source="pk")
    position = IntegerField()
    role = TextField()
    content = serializers.JSONField()
    tool_calls = serializers.JSONField(allow_null=True)
    name = TextField(allow_blank=True)
    tool_call_id = TextField(allow_blank=True)
    client_message_id = TextField(
        allow_null=True, help_text="the turn's id in the client's own system; null: none given"
    )
    filter_tags = serializers.DictField()
    occurred_at = serializers.DateTimeField()
    extraction = TextField()
    images = MessageImageSerializer(many=True, read_only=True)

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["client_message_id"] = data["client_message_id"] or None
        if self.context.get("secrets_of") != instance.client_id:
            for name in ("content", "tool_calls"):
                data[name] = sensitive_redacted_json(data[name], mask=MASK)
        return data


class SessionCloseInputSerializer(serializers.Serializer):
    user_id = UserIdField()
    outcome = TextChoiceField(
        choices=Outcome.values,
        required=False,
        allow_null=True,
        default=None,
        help_text="task sessions: how the work went, as the agent judges it; the learning run "
        "takes it for the session's outcome",
    )
    note = TextField(
        required=False,
        allow_null=True,
        allow_blank=True,
        default=None,
        max_length=MAX_NOTE_CHARS,
        help_text="task sessions: what the agent says about how it went (blank: nothing); "
        "lessons learned from the session quote it, redacted",
    )
