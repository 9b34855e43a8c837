"""The JSON Schema the LLM extractor's answer must match: one list of items per memory type."""

from __future__ import annotations

from typing import Any

_SOURCES = {"type": "array", "items": {"type": "integer"}}
EXTRACTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["core", "episodic", "semantic", "procedural", "resource", "knowledge_vault"],
    "properties": {
        "core": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["label", "value", "mode"],
                "properties": {
                    "label": {"type": "string", "enum": ["human", "persona"]},
                    "value": {"type": "string"},
                    "mode": {"type": "string", "enum": ["append", "replace"]},
                },
            },
        },
        "episodic": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["summary", "details", "actor", "source_message_ids"],
                "properties": {
                    "event_type": {"type": "string"},
                    "summary": {"type": "string"},
                    "details": {"type": "string"},
                    "actor": {"type": "string"},
                    "source_message_ids": _SOURCES,
                },
            },
        },
        "semantic": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "summary", "source_message_ids"],
                "properties": {
                    "name": {"type": "string"},
                    "summary": {"type": "string"},
                    "details": {"type": "string"},
                    "source": {"type": "string"},
                    "source_message_ids": _SOURCES,
                },
            },
        },
        "procedural": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["summary", "steps", "source_message_ids"],
                "properties": {
                    "entry_type": {"type": "string"},
                    "summary": {"type": "string"},
                    "steps": {"type": "array", "items": {"type": "string"}},
                    "source_message_ids": _SOURCES,
                },
            },
        },
        "resource": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["title", "summary", "source_message_ids"],
                "properties": {
                    "title": {"type": "string"},
                    "summary": {"type": "string"},
                    "content": {"type": "string"},
                    "resource_type": {"type": "string"},
                    "uri": {"type": "string"},
                    "source_message_ids": _SOURCES,
                },
            },
        },
        "knowledge_vault": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["caption", "secret_value", "sensitivity", "source_message_ids"],
                "properties": {
                    "entry_type": {"type": "string"},
                    "caption": {"type": "string"},
                    "secret_value": {"type": "string"},
                    "sensitivity": {"type": "string", "enum": ["low", "medium", "high"]},
                    "source": {"type": "string"},
                    "source_message_ids": _SOURCES,
                },
            },
        },
    },
}
