from __future__ import annotations

from typing import Any

from rest_framework import serializers

from accounts.models import EndUser
from accounts.selectors import EndUserRow
from mirix_site.api.fields import BooleanField, IntegerField, TextField, UserIdField, datetime_text


class UserCreateOrGetInputSerializer(serializers.Serializer):
    user_id = UserIdField(required=False, allow_null=True)
    name = TextField(required=False, allow_null=True, allow_blank=True, max_length=255)


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
