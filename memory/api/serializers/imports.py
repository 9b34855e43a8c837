"""Shapes of ``POST /memory/import``: the request's parameters, one line's turn, the answer."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers

from memory.api.serializers.memories import FilterTagsField, TurnsPlaceSerializer
from memory.extractors import Proposal
from memory.extractors.llm import proposed_fields
from memory.services.imports import ImportMemory, ImportRefusal, ImportTurn
from memory.types import MEMORY_TYPES, TYPE_ALIASES, memory_type_resolve
from mirix_site.api.fields import (
    BooleanField,
    FloatField,
    IntegerField,
    PatternField,
    TextChoiceField,
    TextField,
    UserIdField,
)
from mirix_site.api.parsers import JsonTooDeepError, json_text_load
from sessions.api.serializers import MESSAGE_ROLES
from sessions.content import CLIENT_ID_INVALID, CLIENT_MESSAGE_ID_PATTERN, message_normalize

# The turn's own fields on a line, checked by ``message_normalize``.
_TURN_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id", "client_message_id")
USER_ID_REQUIRED = "Required: on the line, or as the request's user_id."
CLIENT_MESSAGE_ID_REQUIRED = (
    "Required: an import's turns carry their own id, so that a line sent again (a retry, the "
    "file sent again after a cut) is stored once."
)


class ImportParamsSerializer(serializers.Serializer):
    import_id = PatternField(
        CLIENT_MESSAGE_ID_PATTERN,
        required=False,
        max_length=255,
        error_messages={"invalid": CLIENT_ID_INVALID},
        help_text="the client's name for the import; a request naming it again continues it "
        "(default: a new id, in the answer)",
    )
    user_id = UserIdField(
        required=False, help_text="the user of lines that name none (a line's user_id wins)"
    )
    expected_lines = IntegerField(
        required=False,
        min_value=1,
        help_text="how many lines the whole import has: its ETA is computed against it",
    )


class ImportTurnSerializer(TurnsPlaceSerializer):
    """A line's fields around its turn (the turn itself as /memory/add's messages take one)."""

    user_id = UserIdField(required=False)
    filter_tags = FilterTagsField()


ImportLine = ImportTurn | ImportMemory | ImportRefusal


def _texts(errors: dict[str, Any]) -> dict[str, list[str]]:
    """A serializer's errors as a refusal keeps them: field -> texts."""
    return {name: [str(text) for text in texts] for name, texts in errors.items()}


def import_line_read(text: str, *, line: int, default_user_id: str | None) -> ImportLine:
    """One NDJSON line as an ``ImportTurn`` or ``ImportMemory``, or an ``ImportRefusal``
    saying what is wrong."""
    try:
        record = json_text_load(text)
    except JsonTooDeepError as exc:
        return ImportRefusal(line=line, errors={"line": [str(exc.detail)]})
    except ValueError:
        return ImportRefusal(line=line, errors={"line": ["Not a JSON object."]})
    return import_record_read(record, line=line, default_user_id=default_user_id)


class ImportMemorySerializer(serializers.Serializer):
    """A line's fields around its memory (the memory's own fields as its type names them)."""

    user_id = UserIdField(required=False)
    memory_type = TextChoiceField(choices=[*MEMORY_TYPES, *TYPE_ALIASES])
    client_memory_id = PatternField(
        CLIENT_MESSAGE_ID_PATTERN,
        required=False,
        max_length=255,
        error_messages={"invalid": CLIENT_ID_INVALID},
    )
    filter_tags = FilterTagsField()
    occurred_at = serializers.DateTimeField(required=False, allow_null=True, default_timezone=UTC)


def _memory_read(record: dict[str, Any], *, line: int, default_user_id: str | None) -> ImportLine:
    head = ImportMemorySerializer(data=record)
    if not head.is_valid():
        return ImportRefusal(line=line, errors=_texts(head.errors))
    data = head.validated_data
    memory_type = memory_type_resolve(data["memory_type"])
    fields = proposed_fields(memory_type.name, record)
    if fields is None:
        needed = [field.name for field in memory_type.extracted_fields if field.required]
        return ImportRefusal(
            line=line,
            errors={"fields": [f"A {memory_type.name} memory needs {', '.join(needed)}."]},
        )
    user_id = data.get("user_id") or default_user_id
    if user_id is None:
        return ImportRefusal(line=line, errors={"user_id": [USER_ID_REQUIRED]})
    tags = data.get("filter_tags") or {}
    proposal = Proposal(
        memory_type=memory_type.name,
        fields=fields,
        source_message_ids=[],
        occurred_at=data.get("occurred_at"),
        filter_tags=tags,
        turn_tags=[tags],
        client_memory_id=data.get("client_memory_id"),
    )
    return ImportMemory(line=line, user_id=user_id, proposal=proposal)


def import_record_read(record: Any, *, line: int, default_user_id: str | None) -> ImportLine:
    """A line's decoded JSON as an ``ImportTurn`` or an ``ImportMemory`` (a line naming a
    ``memory_type``), or an ``ImportRefusal``."""
    if not isinstance(record, dict):
        return ImportRefusal(line=line, errors={"line": ["Not a JSON object."]})
    if "memory_type" in record:
        return _memory_read(record, line=line, default_user_id=default_user_id)
    fields = ImportTurnSerializer(data=record)
    errors: dict[str, list[str]] = {}
    if not fields.is_valid():
        errors.update(_texts(fields.errors))
    try:
        message = message_normalize(
            {name: record.get(name) for name in _TURN_FIELDS}, roles=MESSAGE_ROLES, where="turn"
        )
    except DjangoValidationError as exc:
        errors.update(
            {name.removeprefix("turn."): texts for name, texts in exc.message_dict.items()}
        )
        message = None
    if message is not None and not message.client_message_id:
        errors["client_message_id"] = [CLIENT_MESSAGE_ID_REQUIRED]
    data = fields.validated_data if not errors else {}
    user_id = data.get("user_id") or default_user_id
    if not errors and user_id is None:
        errors["user_id"] = [USER_ID_REQUIRED]
    if errors or message is None:
        return ImportRefusal(line=line, errors=errors)
    message.occurred_at = data.get("occurred_at")
    return ImportTurn(
        line=line,
        user_id=user_id,
        session_id=data.get("session_id"),
        session_tag=data.get("session_tag"),
        filter_tags=data.get("filter_tags") or {},
        message=message,
    )


class NdjsonLines:
    """The NDJSON lines of ``stream`` (anything with ``readline(size)`` giving bytes: a request,
    a file), read one at a time as they are iterated, at most ``IMPORT_MAX_LINE_BYTES`` of a
    line held in memory, numbered as the file's lines (blank ones skipped). With
    ``max_lines``, reading stops there, and ``more`` says whether a line was left."""

    def __init__(self, stream: Any, *, default_user_id: str | None, max_lines: int | None) -> None:
        self.stream = stream
        self.default_user_id = default_user_id
        self.max_lines = max_lines
        self.more = False

    def __iter__(self) -> Iterator[ImportLine]:
        limit = settings.IMPORT_MAX_LINE_BYTES
        number = 0
        while text := self.stream.readline(limit + 1):
            number += 1
            too_long = len(text) > limit and not text.endswith(b"\n")
            while text and not text.endswith(b"\n") and len(text) > limit:
                text = self.stream.readline(limit + 1)  # the rest of the long line, dropped
            if not too_long and not text.strip():
                continue
            if self.max_lines is not None and number > self.max_lines:
                self.more = True
                return
            if too_long:
                yield ImportRefusal(line=number, errors={"line": [f"Longer than {limit} bytes."]})
                continue
            try:
                decoded = text.decode()
            except UnicodeDecodeError:
                yield ImportRefusal(line=number, errors={"line": ["Not UTF-8 text."]})
                continue
            yield import_line_read(decoded, line=number, default_user_id=self.default_user_id)


class ImportJsonSerializer(serializers.Serializer):
    """The import as one JSON body: its lines in a list (NDJSON streams them instead)."""

    lines = serializers.ListField(
        child=serializers.JSONField(),
        min_length=1,
        max_length=settings.IMPORT_MAX_LINES,
        help_text="each a line as the NDJSON form sends it: a turn with its user_id, "
        "session_id, session_tag, filter_tags, occurred_at, role, content and "
        "client_message_id (required), or a memory naming its memory_type with its type's "
        "fields, user_id, occurred_at, filter_tags and client_memory_id",
    )


class ImportRefusalSerializer(serializers.Serializer):
    line = IntegerField()
    errors = serializers.DictField(child=serializers.ListField(child=TextField()))


class ImportJobSerializer(serializers.Serializer):
    import_id = TextField()
    state = TextField()
    requests = IntegerField()
    expected_lines = IntegerField(allow_null=True)
    lines_read = IntegerField()
    turns_stored = IntegerField()
    turns_found = IntegerField()
    memories_stored = IntegerField()
    memories_found = IntegerField()
    lines_refused = IntegerField()
    eta_seconds = FloatField(
        allow_null=True,
        help_text="at the rate so far, to expected_lines; null: not announced, or reached",
    )
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class ImportOutputSerializer(serializers.Serializer):
    success = BooleanField()
    import_id = TextField()
    lines_read = IntegerField(help_text="this request's")
    turns_stored = IntegerField(help_text="this request's turns stored now")
    turns_found = IntegerField(help_text="this request's turns stored before: not again")
    memories_stored = IntegerField(help_text="this request's memories stored now")
    memories_found = IntegerField(help_text="this request's memories stored before: not again")
    lines_refused = IntegerField()
    refused = ImportRefusalSerializer(
        many=True, help_text="this request's refused lines (the first 100), each with why"
    )
    more = BooleanField(
        help_text="lines were left unread past the request's limit: send them in another "
        "request naming the same import_id"
    )
    job = ImportJobSerializer(help_text="the whole import, every request so far")
