"""Request and response shapes of /memory/add, of reading and editing memories, and of a
memory itself (MIRIX client 0.1.7 shapes)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import UTC
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied

from accounts.tenancy import Tenant
from memory.crypto import secret_decrypt
from memory.types import (
    MEMORY_TYPES,
    Field,
    MemoryType,
    memory_type_names,
    memory_type_resolve,
)
from mirix_site.api.fields import (
    BooleanField,
    IntegerField,
    JsonTextField,
    PatternField,
    TextChoiceField,
    TextField,
    UserIdField,
)
from mirix_site.api.schema import error_response
from mirix_site.api.serializers import InputSerializer
from sessions.api.serializers import MESSAGE_ROLES, MessageInputField
from sessions.content import (
    MAX_NAME_CHARS,
    MAX_TOOL_DEFINITIONS,
    MAX_TOOL_DESCRIPTION_CHARS,
    MessageInput,
    message_normalize,
    tools_normalize,
)
from sessions.models import Session
from sessions.selectors import message_image_ids
from sessions.sensitive import MASK

SESSION_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
SESSION_ID_INVALID = "1-64 characters: letters, digits, underscore and hyphen only."
MAX_MESSAGES_PER_ADD = 1000
MAX_FILTER_TAGS_BYTES = 8192


SECRETS_DENIED = "This API key may not show secrets: issue one with create_api_key --secrets."
# The answer of every endpoint with ``include_secrets`` to a key that may not show them.
SECRETS_DENIED_RESPONSE = error_response(
    "include_secrets, from an API key without the secrets permission."
)


def include_secrets_field() -> BooleanField:
    """The one ``include_secrets`` parameter of every endpoint that returns memories."""
    return BooleanField(
        required=False,
        default=False,
        help_text="show knowledge-vault values the caller's client wrote, in plain text "
        "(the key needs the secrets permission; 403 without it)",
    )


def secrets_context(tenant: Tenant, *, requested: bool) -> dict[str, str | None]:
    """The serializer context that decides which vault values a response shows: the caller's
    own client's, when asked for and its key may (``ApiKey.reveals_secrets``); another
    client's, read through a read scope, stay masked. Asked for without the permission, 403."""
    if requested and not tenant.reveals_secrets:
        raise PermissionDenied(SECRETS_DENIED)
    return {"secrets_of": tenant.secrets_of if requested else None}


FILTER_TAGS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "nullable": True,
    "additionalProperties": True,
    "description": f"tag names to values (at most {MAX_FILTER_TAGS_BYTES} bytes of JSON); "
    "memories keep the tags of the request that produced them",
    # What /api/docs/ fills in for "Try it out": no tag, where its own made-up one
    # ({"additionalProp1": {}}) would be applied and find nothing.
    "example": {},
}


def filter_tags_check(value: Any) -> dict[str, Any]:
    """``filter_tags`` as every endpoint takes it: an object of tag names to values."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise serializers.ValidationError("A JSON object of tag names to values.")
    if len(json.dumps(value)) > MAX_FILTER_TAGS_BYTES:
        raise serializers.ValidationError(f"At most {MAX_FILTER_TAGS_BYTES} bytes of JSON.")
    return value


@extend_schema_field(FILTER_TAGS_SCHEMA)
class FilterTagsField(serializers.JSONField):
    """``filter_tags`` in a body: a JSON object (or null, none)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, allow_null=True, **kwargs)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        return filter_tags_check(super().to_internal_value(data))


def filter_tags_query_field(**kwargs: Any) -> JsonTextField:
    """``filter_tags`` in a query string: the same object, as JSON text."""
    return JsonTextField(schema=FILTER_TAGS_SCHEMA, required=False, **kwargs)


def messages_check(raw_messages: list[Any]) -> list[MessageInput]:
    """Conversation turns as every endpoint takes them, each checked and normalized; errors
    name the message (``messages.3.role``)."""
    try:
        return [
            message_normalize(raw, roles=MESSAGE_ROLES, where=f"messages.{index}")
            for index, raw in enumerate(raw_messages)
        ]
    except DjangoValidationError as error:
        raise serializers.ValidationError(error.message_dict) from None


@extend_schema_field(
    FILTER_TAGS_SCHEMA
    | {"properties": {"session_id": {"type": "string", "pattern": SESSION_ID_PATTERN}}}
)
class SessionFilterTagsField(FilterTagsField):
    """A /memory/add's tags, whose ``session_id`` names the session (MIRIX 0.1.7 clients name
    it only there)."""


_TOOL_SPEC: dict[str, Any] = {
    "name": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS, "pattern": r"\S"},
    "description": {"type": "string", "nullable": True, "maxLength": MAX_TOOL_DESCRIPTION_CHARS},
}
_TOOL_OPENAI: dict[str, Any] = {
    "type": "object",
    "required": ["function"],
    "properties": {
        "function": {"type": "object", "required": ["name"], "properties": _TOOL_SPEC},
    },
}
_TOOL_NAMED: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "properties": {**_TOOL_SPEC, "function": {"not": {"type": "object"}}},
}
TOOLS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "nullable": True,
    "maxItems": MAX_TOOL_DEFINITIONS,
    "description": "the tools the session's agent has, as the chat APIs take them "
    '(OpenAI: {"type": "function", "function": {"name", "description", "parameters"}}; '
    'Anthropic and MCP: {"name", "description", "input_schema"}); each add may send them, '
    "later definitions of a name replace earlier ones. Skills learned from the session say "
    f"what their tools do from these descriptions (at most {MAX_TOOL_DESCRIPTION_CHARS} "
    "characters each).",
    "items": {"anyOf": [_TOOL_OPENAI, _TOOL_NAMED]},
}


@extend_schema_field(TOOLS_SCHEMA)
class ToolsField(serializers.JSONField):
    """``tools`` of a /memory/add: tool definitions, kept as name → description."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, allow_null=True, **kwargs)


class TurnsPlaceSerializer(InputSerializer):
    """Where turns go and when they were said: their session (none: the user's default
    conversation), its tag, and their time (none: now)."""

    session_id = PatternField(
        SESSION_ID_PATTERN,
        required=False,
        allow_null=True,
        error_messages={"invalid": SESSION_ID_INVALID},
    )
    session_tag = TextChoiceField(
        choices=[tag.value for tag in Session.Tag], required=False, allow_null=True
    )
    occurred_at = serializers.DateTimeField(required=False, allow_null=True, default_timezone=UTC)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """The session named by ``session_id`` or by ``filter_tags.session_id`` (as MIRIX
        0.1.7 clients name it), by both only if they are equal; a task session needs one."""
        tags = attrs.get("filter_tags") or {}
        session_id = attrs.get("session_id")
        tagged = tags.get("session_id")
        if tagged is not None:
            if not isinstance(tagged, str) or not re.fullmatch(SESSION_ID_PATTERN, tagged):
                raise serializers.ValidationError({"filter_tags.session_id": [SESSION_ID_INVALID]})
            if session_id is not None and tagged != session_id:
                raise serializers.ValidationError(
                    {
                        "filter_tags.session_id": [
                            "Differs from session_id; send one or make them equal."
                        ]
                    }
                )
            session_id = tagged  # MIRIX 0.1.7 clients name the session only in filter_tags
        if attrs.get("session_tag") == Session.Tag.TASK and session_id is None:
            raise serializers.ValidationError(
                {
                    "session_id": [
                        "A task session needs a session_id (skills are learned per session)."
                    ]
                }
            )
        return {**attrs, "session_id": session_id}


class MemoryAddInputSerializer(TurnsPlaceSerializer):
    """Turns to store. A task session (``session_tag: task``) needs a session_id; the session
    may be named by ``session_id`` or by ``filter_tags.session_id`` (as MIRIX 0.1.7 clients
    do), and by both only if they are equal."""

    user_id = UserIdField(required=False, allow_null=True)
    meta_agent_id = TextField(required=False, allow_null=True, max_length=64)
    messages = serializers.ListField(
        child=MessageInputField(), min_length=1, max_length=MAX_MESSAGES_PER_ADD
    )
    filter_tags = SessionFilterTagsField()
    tools = ToolsField()
    # Sent by the MIRIX client; they mean nothing here and are accepted and ignored.
    chaining = BooleanField(required=False)
    verbose = BooleanField(required=False)
    use_cache = BooleanField(required=False)
    async_add = BooleanField(required=False)
    local_model_for_retrieval = TextField(required=False, allow_null=True)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        messages = messages_check(attrs["messages"])
        try:
            tools = tools_normalize(attrs.get("tools"))
        except DjangoValidationError as error:
            raise serializers.ValidationError(error.message_dict) from None
        return {
            "user_id": attrs.get("user_id") or "default",
            "meta_agent_id": attrs.get("meta_agent_id"),
            "messages": messages,
            "session_id": attrs["session_id"],
            "session_tag": attrs.get("session_tag"),
            "filter_tags": attrs.get("filter_tags") or {},
            "tools": tools,
            "occurred_at": attrs.get("occurred_at"),
        }


class MemoryAddOutputSerializer(serializers.Serializer):
    success = BooleanField()
    message = TextField()
    status = TextChoiceField(["queued", "stored"])
    agent_id = TextField(allow_null=True)
    message_count = IntegerField()
    session_id = TextField(allow_null=True)
    message_ids = serializers.ListField(child=TextField())


class UserScopedInputSerializer(serializers.Serializer):
    user_id = UserIdField()


# The largest page of one type a read returns (0 or less: all of them).
MAX_COMPONENTS_LIMIT = 1_000_000


class ComponentsParamsSerializer(serializers.Serializer):
    """``GET /memory/components``: which types, how many of each, secrets and superseded
    memories shown or not."""

    memory_type = TextChoiceField(["all", *memory_type_names()], required=False, default="all")
    limit = IntegerField(
        required=False,
        default=50,
        max_value=MAX_COMPONENTS_LIMIT,
        help_text="per type; 0 or less: all",
    )
    include_secrets = include_secrets_field()
    include_superseded = BooleanField(
        required=False, default=False, help_text="also memories another one has replaced"
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        name = attrs["memory_type"]
        if name == "all":
            return attrs | {"memory_types": list(MEMORY_TYPES.values())}
        return attrs | {"memory_types": [memory_type_resolve(name)]}


class MemoryDetailParamsSerializer(serializers.Serializer):
    user_id = UserIdField(
        required=False,
        help_text="the user a procedural memory belongs to (procedural memories are addressed "
        "within one user: required for them)",
    )
    include_superseded = BooleanField(
        required=False,
        default=False,
        help_text="reach a memory another one has replaced (otherwise 404)",
    )


class MemoryReadParamsSerializer(MemoryDetailParamsSerializer):
    include_secrets = include_secrets_field()


# --- Memories out -------------------------------------------------------------------------------


class MemorySerializer(serializers.Serializer):
    """Any memory, as its type's fields plus id, memory_type, provenance and filter tags
    (``memory.tags``).
    A knowledge-vault value is masked unless the context's ``secrets_of`` (``secrets_context``)
    names the client that wrote it."""

    id = TextField()
    memory_type = TextField()
    user_id = TextField()
    client_id = TextField()
    filter_tags = serializers.DictField(help_text="the tags every turn it cites carries")
    turn_tags = serializers.ListField(
        child=serializers.DictField(),
        help_text="each distinct tag object of the turns it cites; a search's filter_tags "
        "match a memory when one of them contains them",
    )
    source_message_ids = serializers.ListField(child=TextField())
    image_ids = serializers.ListField(
        child=TextField(), help_text="the images the source turns showed (GET /images/{id})"
    )
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def to_representation(self, instance: models.Model) -> dict[str, Any]:
        memory_type: MemoryType = self.context["memory_type"]
        data: dict[str, Any] = {
            "id": str(instance.pk),
            "memory_type": memory_type.name,
            "user_id": instance.end_user.user_id,
            "client_id": instance.client_id,
        }
        for field in memory_type.returned_fields:
            name = field.name
            if name == "secret_value":
                plain = secret_decrypt(instance.secret_value_encrypted)
                shown = self.context.get("secrets_of") == instance.client_id
                data[name] = plain if shown else MASK
            elif field.kind == "time":
                moment = getattr(instance, name)
                data[name] = moment.isoformat() if moment is not None else None
            else:
                data[name] = getattr(instance, name)
        if memory_type.name == "core":
            data["label"] = instance.label
        data["filter_tags"] = instance.filter_tags
        # A core block is edited in place, whatever turns said it: it keeps no turn's tags.
        data["turn_tags"] = getattr(instance, "turn_tags", [])
        data["source_message_ids"] = [str(message_id) for message_id in instance.source_message_ids]
        data["image_ids"] = _image_ids(instance, self.context)
        data["created_at"] = instance.created_at.isoformat()
        data["updated_at"] = instance.updated_at.isoformat()
        return data


def images_context(rows: Iterable[Any]) -> dict[str, dict[int, list[str]]]:
    """The serializer context naming the images of these memories' source turns, read in one
    query for a whole response (a serializer without it reads them memory by memory)."""
    return {
        "images_of": message_image_ids(
            message_ids=[message_id for row in rows for message_id in row.source_message_ids]
        )
    }


def _image_ids(row: Any, context: dict[str, Any]) -> list[str]:
    images_of = context.get("images_of")
    if images_of is None:
        images_of = message_image_ids(message_ids=row.source_message_ids)
    shown = [sha for message_id in row.source_message_ids for sha in images_of.get(message_id, ())]
    return list(dict.fromkeys(shown))


# A PATCH's text may be as long as any text column holds; the model's own limit refuses more.
MAX_PATCH_TEXT = 65_536


def _editable_field(field: Field) -> serializers.Field:
    """The field a PATCH changes ``field`` with (every one optional)."""
    optional: dict[str, Any] = {"required": False}
    if field.kind == "time":
        return serializers.DateTimeField(default_timezone=UTC, **optional)
    if field.kind == "steps":
        return serializers.ListField(child=TextField(max_length=2000), max_length=100, **optional)
    if field.kind == "count":
        return IntegerField(min_value=1, max_value=100_000, **optional)
    if field.kind == "choice":
        return TextChoiceField(list(field.choices), **optional)
    return TextField(allow_blank=True, max_length=MAX_PATCH_TEXT, **optional)


class _MemoryUpdateSerializer(serializers.Serializer):
    """A PATCH body: a field the memory's type does not edit is refused, not dropped."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, dict):
            editable = ", ".join(self.fields)
            unknown = {
                str(name): [f"Not an editable field here; editable: {editable}."]
                for name in data
                if name not in self.fields
            }
            if unknown:
                raise serializers.ValidationError(unknown)
        return super().to_internal_value(data)


def _update_serializer(
    name: str, fields: Iterable[Field], doc: str
) -> type[serializers.Serializer]:
    attributes = {field.name: _editable_field(field) for field in fields}
    return type(name, (_MemoryUpdateSerializer,), {**attributes, "__doc__": doc})


def _editable(memory_type: MemoryType) -> list[Field]:
    return [field for field in memory_type.fields if field.editable]


_UPDATE_SERIALIZERS = {
    memory_type.name: _update_serializer(
        f"{memory_type.name.title().replace('_', '')}UpdateSerializer",
        _editable(memory_type),
        f"The editable fields of a {memory_type.name} memory.",
    )
    for memory_type in MEMORY_TYPES.values()
}
# The PATCH body the schema declares: a memory's type decides which of these it takes, and
# one path serves every type.
MemoryUpdateSerializer = _update_serializer(
    "MemoryUpdateSerializer",
    {field.name: field for type_ in MEMORY_TYPES.values() for field in _editable(type_)}.values(),
    "At least one field to change, among the editable fields of the memory's type: "
    + "; ".join(
        f"{name}: {', '.join(type_.editable_fields)}" for name, type_ in MEMORY_TYPES.items()
    )
    + ".",
)


class MemoryUpdateSchema(OpenApiSerializerExtension):
    target_class = MemoryUpdateSerializer

    def map_serializer(self, auto_schema: AutoSchema, direction: str) -> dict[str, Any]:
        schema = auto_schema._map_basic_serializer(self.target, direction)
        return schema | {"minProperties": 1, "additionalProperties": False}


def memory_update_serializer(memory_type: MemoryType) -> type[serializers.Serializer]:
    """The PATCH body of one memory type: its editable fields, all optional."""
    return _UPDATE_SERIALIZERS[memory_type.name]
