"""The JSON Schema the LLM extractor's answer must match: one list of items per memory type,
each item the type's extracted fields (``memory.types``)."""

from __future__ import annotations

from typing import Any

from memory.types import MEMORY_TYPES, Field, MemoryType

_SOURCES = {"type": "array", "items": {"type": "integer"}}


def _property(field: Field) -> dict[str, Any]:
    if field.kind == "steps":
        return {"type": "array", "items": {"type": "string"}}
    if field.kind == "choice":
        return {"type": "string", "enum": list(field.choices)}
    return {"type": "string"}


def _items(memory_type: MemoryType) -> dict[str, Any]:
    fields = memory_type.extracted_fields
    required = [field.name for field in fields if field.asked]
    properties = {field.name: _property(field) for field in fields}
    if memory_type.cites_sources:
        required.append("source_message_ids")
        properties["source_message_ids"] = _SOURCES
    return {"type": "object", "required": required, "properties": properties}


EXTRACTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": list(MEMORY_TYPES),
    "properties": {
        name: {"type": "array", "items": _items(memory_type)}
        for name, memory_type in MEMORY_TYPES.items()
    },
}
