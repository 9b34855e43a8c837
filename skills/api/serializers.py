"""Request and response shapes of the experience endpoints (in the MIRIX API's style)."""

from __future__ import annotations

import json
from datetime import UTC
from typing import Any

from drf_spectacular.utils import extend_schema_field, inline_serializer
from rest_framework import serializers

from memory.api.serializers.memories import FilterTagsField, messages_check
from mirix_site.api.fields import (
    BooleanField,
    FloatField,
    IntegerField,
    PatternField,
    TextChoiceField,
    TextField,
    UserIdField,
)
from mirix_site.common.ids import ROW_ID_PATTERN
from sessions.api.serializers import MessageInputField
from skills.models import Experience, Outcome
from skills.services.experiences import ExperienceInput

ID_PATTERN = f"^{ROW_ID_PATTERN}$"
ID_INVALID = "An id: 1-18 digits, the first not 0."
MAX_TASK_CHARS = 4000
MAX_ACTION_CHARS = 2000
MAX_REASON_CHARS = 4000
MAX_CONTEXT_BYTES = 16_384
MAX_BATCH = 1000
MAX_K = 100
MAX_HALF_LIFE_DAYS = 36_500.0

CONTEXT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": True,
    "description": f"what the attempt ran in (at most {MAX_CONTEXT_BYTES} bytes of JSON); "
    "recall filters on it with context.<key>=<value>",
}


def id_field(**kwargs: Any) -> PatternField:
    return PatternField(ID_PATTERN, error_messages={"invalid": ID_INVALID}, **kwargs)


@extend_schema_field(CONTEXT_SCHEMA)
class ContextField(serializers.JSONField):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, allow_null=True, **kwargs)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        value = super().to_internal_value(data)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise serializers.ValidationError("A JSON object.")
        if len(json.dumps(value)) > MAX_CONTEXT_BYTES:
            raise serializers.ValidationError(f"At most {MAX_CONTEXT_BYTES} bytes of JSON.")
        return value


def half_life_field(**kwargs: Any) -> FloatField:
    kwargs.setdefault(
        "help_text",
        "days after which an experience's weight halves (ranking only; counts stay exact); "
        "0: no decay; default: the client's setting (GET /experiences/settings)",
    )
    return FloatField(
        required=False, allow_null=True, min_value=0.0, max_value=MAX_HALF_LIFE_DAYS, **kwargs
    )


class ExperienceSettingsSerializer(serializers.Serializer):
    half_life_days = half_life_field(
        help_text="the half-life recall and recommend use when a request names none "
        "(null or 0: none)"
    )


class ExperienceFieldsSerializer(serializers.Serializer):
    """One experience as a caller records it."""

    task = TextField(max_length=MAX_TASK_CHARS)
    action = TextField(max_length=MAX_ACTION_CHARS)
    outcome = TextChoiceField(choices=Outcome.values)
    score = FloatField(
        required=False,
        allow_null=True,
        min_value=0.0,
        max_value=1.0,
        help_text="0-1; default 1 for a success, 0.5 partial, 0 failure",
    )
    reason = TextField(required=False, allow_blank=True, default="", max_length=MAX_REASON_CHARS)
    context = ContextField()
    filter_tags = FilterTagsField()
    supersedes = id_field(required=False, allow_null=True, help_text="an experience this replaces")
    recommendation_id = id_field(
        required=False,
        allow_null=True,
        help_text="the recommendation this is the outcome of following",
    )
    occurred_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        default_timezone=UTC,
        help_text="ISO 8601, not in the future (importing history); default now",
    )

    def to_input(self) -> ExperienceInput:
        return experience_input(self.validated_data)


def experience_input(data: dict[str, Any], **overrides: Any) -> ExperienceInput:
    values = {
        "task": data["task"],
        "action": data["action"],
        "outcome": data["outcome"],
        "score": data.get("score"),
        "reason": data.get("reason") or "",
        "context": data.get("context") or {},
        "filter_tags": data.get("filter_tags") or {},
        "supersedes": int(data["supersedes"]) if data.get("supersedes") else None,
        "recommendation_id": (
            int(data["recommendation_id"]) if data.get("recommendation_id") else None
        ),
        "occurred_at": data.get("occurred_at"),
    }
    return ExperienceInput(**(values | overrides))


class ExperienceRecordSerializer(ExperienceFieldsSerializer):
    user_id = UserIdField()


class ExperienceBatchSerializer(serializers.Serializer):
    user_id = UserIdField()
    experiences = serializers.ListField(
        child=ExperienceFieldsSerializer(), min_length=1, max_length=MAX_BATCH
    )


class FailureRecordSerializer(ExperienceRecordSerializer):
    """A dead end: its reason is required, its outcome is failure."""

    outcome = None  # type: ignore[assignment]
    reason = TextField(max_length=MAX_REASON_CHARS)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        return attrs | {"outcome": Outcome.FAILURE.value}


class ConversationRecordSerializer(serializers.Serializer):
    user_id = UserIdField()
    messages = serializers.ListField(child=MessageInputField(), min_length=1, max_length=1000)
    outcome = TextChoiceField(
        choices=Outcome.values,
        required=False,
        allow_null=True,
        help_text="the ground truth; always wins over what the transcript suggests",
    )
    score = FloatField(required=False, allow_null=True, min_value=0.0, max_value=1.0)
    context = ContextField()
    filter_tags = FilterTagsField()
    recommendation_id = id_field(required=False, allow_null=True)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        return attrs | {"normalized": messages_check(attrs["messages"])}


class RecallParamsSerializer(serializers.Serializer):
    user_id = UserIdField()
    query = TextField(max_length=MAX_TASK_CHARS)
    k = IntegerField(required=False, default=5, min_value=1, max_value=MAX_K)
    outcome = TextChoiceField(choices=Outcome.values, required=False, allow_null=True)
    include_superseded = BooleanField(required=False, default=False)
    half_life_days = half_life_field()
    search_method = TextChoiceField(
        choices=["hybrid", "bm25", "embedding"], required=False, default="hybrid"
    )


class RecommendParamsSerializer(serializers.Serializer):
    user_id = UserIdField()
    task = TextField(max_length=MAX_TASK_CHARS)
    explore = BooleanField(
        required=False, default=False, help_text="rank by a Thompson draw instead of the bound"
    )
    seed = IntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        help_text="makes an explore draw reproducible",
    )
    weight_by_relevance = BooleanField(required=False, default=True)
    include_superseded = BooleanField(required=False, default=False)
    half_life_days = half_life_field()


class RecentParamsSerializer(serializers.Serializer):
    user_id = UserIdField()
    outcome = TextChoiceField(choices=Outcome.values, required=False, allow_null=True)


class ActionPhrasingSerializer(serializers.Serializer):
    text = TextField(help_text="the phrasing as first recorded")
    key = TextField(help_text="its normalized words: one key, one phrasing")
    experiences = IntegerField(help_text="how many current experiences phrase it so")


class ActionGroupSerializer(serializers.Serializer):
    """A group of phrasings of one action, whose evidence recommend pools."""

    id = TextField()
    client_id = TextField()
    key = TextField(help_text="the group's key: one of its phrasings' keys")
    phrasings = ActionPhrasingSerializer(many=True)
    outcomes = inline_serializer(
        "ActionGroupOutcomes",
        {"success": IntegerField(), "failure": IntegerField(), "partial": IntegerField()},
    )
    last_at = serializers.DateTimeField(help_text="its newest current experience's time")

    def to_representation(self, instance: Any) -> dict[str, Any]:
        return {
            "id": str(instance.id),
            "client_id": instance.client_id,
            "key": instance.key,
            "phrasings": instance.phrasings,
            "outcomes": instance.outcomes,
            "last_at": serializers.DateTimeField().to_representation(instance.last_at),
        }


class SupersedeSerializer(serializers.Serializer):
    by = id_field(help_text="the experience that replaces this one, of the same user")


class ExperienceSerializer(serializers.Serializer):
    """An experience, with its provenance and what replaced it."""

    id = TextField()
    memory_type = TextField()
    user_id = TextField()
    client_id = TextField()
    task = TextField()
    action = TextField()
    outcome = TextField()
    score = FloatField()
    reason = TextField(allow_blank=True)
    context = serializers.DictField()
    filter_tags = serializers.DictField()
    origin = TextField()
    source_session_id = TextField(allow_null=True)
    source_message_ids = serializers.ListField(child=TextField())
    superseded_by = TextField(allow_null=True)
    recommendation_id = TextField(allow_null=True)
    occurred_at = serializers.DateTimeField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def to_representation(self, instance: Experience) -> dict[str, Any]:
        return {
            "id": str(instance.pk),
            "memory_type": "experience",
            "user_id": instance.end_user.user_id,
            "client_id": instance.client_id,
            "task": instance.task,
            "action": instance.action,
            "outcome": instance.outcome,
            "score": instance.score,
            "reason": instance.reason,
            "context": instance.context,
            "filter_tags": instance.filter_tags,
            "origin": instance.origin,
            "source_session_id": (
                str(instance.source_session_id) if instance.source_session_id else None
            ),
            "source_message_ids": [str(pk) for pk in instance.source_message_ids],
            "superseded_by": str(instance.superseded_by_id) if instance.superseded_by_id else None,
            "recommendation_id": (
                str(instance.recommendation_id) if instance.recommendation_id else None
            ),
            "occurred_at": instance.occurred_at.isoformat(),
            "created_at": instance.created_at.isoformat(),
            "updated_at": instance.updated_at.isoformat(),
        }


class RecalledSerializer(ExperienceSerializer):
    """An experience plus how recall found it (its own ``score`` is the outcome's)."""

    search_score = FloatField()
    similarity = FloatField(allow_null=True)
    ranks = serializers.DictField()
    gate = TextField()

    def to_representation(self, instance: Any) -> dict[str, Any]:
        hit = instance
        candidate = hit.candidate
        return ExperienceSerializer(hit.row).to_representation(hit.row) | {
            "search_score": candidate.score,
            "similarity": candidate.similarity,
            "ranks": {"bm25": candidate.bm25_rank, "embedding": candidate.vector_rank},
            "gate": candidate.gate,
        }
