from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone
from rest_framework import serializers

from accounts.api.fields import BooleanField, IntegerField, PatternField, TextField
from accounts.models import EndUser
from accounts.selectors import EndUserRow

# What MIRIX accepts (its own sample user is "caring cathy"), but for what a URL path segment
# (/users/{user_id}) cannot hold or hides: no slash, no control character (C0, DEL, C1), no
# space at either end, and no U+FFFD, which the JSON parser puts for a NUL or a lone surrogate
# (accounts.api.parsers): a user id that held one is refused, not stored altered.
_USER_ID_CHAR = "[^\\u0000-\\u001F\\u007F-\\u009F\\uFFFD/]"
_USER_ID_EDGE = "[^\\u0000-\\u001F\\u007F-\\u009F\\uFFFD/ ]"
USER_ID_PATTERN = f"^{_USER_ID_EDGE}(?:{_USER_ID_CHAR}{{0,253}}{_USER_ID_EDGE})?$"


class UserIdField(PatternField):
    def __init__(self, **kwargs: object) -> None:
        kwargs.setdefault("max_length", 255)
        super().__init__(
            USER_ID_PATTERN,
            error_messages={
                "invalid": "Must be 1-255 characters, without a slash, a control or NUL "
                "character, or a space at either end."
            },
            **kwargs,
        )


class UserQuerySerializer(serializers.Serializer):
    """The end user a request is about, named by its ``user_id`` query parameter."""

    user_id = UserIdField(help_text="the end user's id")


class UserCreateOrGetInputSerializer(serializers.Serializer):
    user_id = UserIdField(required=False, allow_null=True)
    name = TextField(required=False, allow_null=True, allow_blank=True, max_length=255)


def datetime_text(value: datetime) -> str:
    """A time as DRF's DateTimeField writes it (ISO 8601 in the current time zone, UTC as
    "Z"), without building the field: its copy per serializer cost more than the list's query."""
    text = timezone.localtime(value).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


class UserOutputSerializer(serializers.Serializer):
    """The MIRIX user shape: ``id`` is the caller's own ``user_id``."""

    id = TextField(source="user_id")
    name = TextField()
    organization_id = TextField()
    created_at = serializers.DateTimeField()

    def to_representation(self, instance: EndUser | EndUserRow) -> dict[str, Any]:
        # Built directly: lists render many users, and the per-field machinery of DRF costs
        # more than the query that loaded them (bench/auth.py). The fields above document it.
        return {
            "id": instance.user_id,
            "name": instance.name,
            "organization_id": instance.organization_id,
            "created_at": datetime_text(instance.created_at),
        }


class UserDeleteOutputSerializer(serializers.Serializer):
    success = BooleanField()
    id = TextField()
    deleted = serializers.DictField(child=IntegerField())
