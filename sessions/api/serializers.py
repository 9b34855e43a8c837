from __future__ import annotations

from rest_framework import serializers

from accounts.api.fields import TextField
from accounts.api.serializers import UserIdField


class SessionSerializer(serializers.Serializer):
    id = TextField(source="pk")
    session_id = TextField(allow_null=True)
    user_id = TextField(source="end_user.user_id")
    client_id = TextField()
    tag = TextField()
    status = TextField()
    close_reason = TextField(allow_blank=True)
    message_count = serializers.IntegerField()
    filter_tags = serializers.DictField()
    created_at = serializers.DateTimeField()
    last_activity_at = serializers.DateTimeField()
    closed_at = serializers.DateTimeField(allow_null=True)


class MessageSerializer(serializers.Serializer):
    """A turn as it was sent, with the id that memories cite as provenance."""

    id = TextField(source="pk")
    position = serializers.IntegerField()
    role = TextField()
    content = serializers.JSONField()
    tool_calls = serializers.JSONField(allow_null=True)
    name = TextField(allow_blank=True)
    tool_call_id = TextField(allow_blank=True)
    filter_tags = serializers.DictField()
    occurred_at = serializers.DateTimeField()
    extraction = TextField()


class SessionCloseInputSerializer(serializers.Serializer):
    user_id = UserIdField()
