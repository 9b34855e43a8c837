from __future__ import annotations

from rest_framework import serializers

from accounts.api.serializers import UserIdField


class SessionSerializer(serializers.Serializer):
    id = serializers.CharField(source="pk")
    session_id = serializers.CharField(allow_null=True)
    user_id = serializers.CharField(source="end_user.user_id")
    client_id = serializers.CharField()
    tag = serializers.CharField()
    status = serializers.CharField()
    close_reason = serializers.CharField(allow_blank=True)
    message_count = serializers.IntegerField()
    filter_tags = serializers.DictField()
    created_at = serializers.DateTimeField()
    last_activity_at = serializers.DateTimeField()
    closed_at = serializers.DateTimeField(allow_null=True)


class MessageSerializer(serializers.Serializer):
    """A turn as it was sent, with the id that memories cite as provenance."""

    id = serializers.CharField(source="pk")
    position = serializers.IntegerField()
    role = serializers.CharField()
    content = serializers.JSONField()
    tool_calls = serializers.JSONField(allow_null=True)
    name = serializers.CharField(allow_blank=True)
    tool_call_id = serializers.CharField(allow_blank=True)
    filter_tags = serializers.DictField()
    occurred_at = serializers.DateTimeField()
    extraction = serializers.CharField()


class SessionCloseInputSerializer(serializers.Serializer):
    user_id = UserIdField()
