"""The message format callers send, checked and normalized before anything is stored.

Content is a string or a list of parts: ``{"type": "text", "text"}``, ``{"type": "image_url",
"image_url": {"url": "https://… | data:image/…"}}`` or ``{"type": "image", "image_id": sha256}``.
A ``file_uri`` part or any ``file:`` URL is refused: the server never reads its own files for a
caller. Errors are ``ValidationError``s keyed by the part's path, e.g. ``content.1.image_url``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

MAX_TOOL_CALLS = 128
MAX_NAME_CHARS = 255
# Patterns in the dialect ECMA and Python share: ``message_schema`` publishes them.
IMAGE_ID_PATTERN = r"^[0-9a-f]{64}$"
# An image URL: http(s), or an inline base64 image (its media type and parameters bounded, so
# the check reads at most ~200 characters of a data URL). Schemes are case-insensitive.
IMAGE_URL_PATTERN = (
    r"^([Hh][Tt][Tt][Pp][Ss]?://|[Dd][Aa][Tt][Aa]:[Ii][Mm][Aa][Gg][Ee]/[A-Za-z0-9.+-]{1,50}"
    r"(;[A-Za-z0-9=.+-]{1,30}){0,4};[Bb][Aa][Ss][Ee]64,)"
)
_IMAGE_ID = re.compile(IMAGE_ID_PATTERN)
_IMAGE_URL = re.compile(IMAGE_URL_PATTERN)


@dataclass
class MessageInput:
    """One validated turn, ready to store."""

    role: str
    parts: list[dict[str, Any]]
    text: str
    tool_calls: list[dict[str, Any]] | None = None
    name: str = ""
    tool_call_id: str = ""
    image_urls: list[str] = field(default_factory=list)


def _image_url_check(url: Any, where: str) -> str:
    if not isinstance(url, str) or not url:
        raise ValidationError({where: ["An image URL is required."]})
    if _IMAGE_URL.match(url):
        return url
    lowered = url[:16].lower()
    if lowered.startswith("file:"):
        raise ValidationError(
            {where: ["file: URLs are refused: the server never reads its own files."]}
        )
    if lowered.startswith("data:"):
        raise ValidationError(
            {where: ["A data: URL must be a base64 image (data:image/...;base64,...)."]}
        )
    raise ValidationError({where: ["Only https://, http:// and data:image/ URLs are accepted."]})


def _part_normalize(part: Any, where: str) -> tuple[dict[str, Any], str, str | None]:
    """(stored part, its text, its image URL)."""
    if not isinstance(part, dict):
        raise ValidationError({where: ["A content part must be an object with a type."]})
    kind = part.get("type")
    if kind == "text":
        text = part.get("text")
        if not isinstance(text, str):
            raise ValidationError({f"{where}.text": ["Must be a string."]})
        return {"type": "text", "text": text}, text, None
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        url = _image_url_check(url, f"{where}.image_url")
        return {"type": "image_url", "image_url": {"url": url}}, "", url
    if kind == "image":
        image_id = part.get("image_id")
        if not isinstance(image_id, str) or not _IMAGE_ID.fullmatch(image_id):
            raise ValidationError(
                {f"{where}.image_id": ["Must be the image's sha256 (64 hex characters)."]}
            )
        return {"type": "image", "image_id": image_id}, "", None
    if kind == "file_uri":
        raise ValidationError(
            {where: ["file_uri parts are refused: the server never reads its own files."]}
        )
    raise ValidationError({f"{where}.type": [f"Unknown content part type {kind!r}."]})


def _tool_calls_normalize(raw: Any, where: str) -> list[dict[str, Any]] | None:
    if raw in (None, []):
        return None
    if not isinstance(raw, list) or len(raw) > MAX_TOOL_CALLS:
        raise ValidationError({where: [f"A list of at most {MAX_TOOL_CALLS} tool calls."]})
    for index, call in enumerate(raw):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ValidationError(
                {f"{where}.{index}.function.name": ["Each tool call needs function.name."]}
            )
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str | dict):
            raise ValidationError(
                {f"{where}.{index}.function.arguments": ["A JSON string or object."]}
            )
    # Kept exactly as sent: callers read their tool calls back unchanged.
    return raw


def _name_check(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_NAME_CHARS:
        raise ValidationError({where: [f"A string of at most {MAX_NAME_CHARS} characters."]})
    return value


def message_normalize(raw: Any, *, roles: tuple[str, ...], where: str) -> MessageInput:
    if not isinstance(raw, dict):
        raise ValidationError({where: ["A message must be an object with role and content."]})
    role = raw.get("role")
    if role not in roles:
        raise ValidationError(
            {f"{where}.role": [f"Unknown role {role!r}; one of {', '.join(roles)}."]}
        )
    content = raw.get("content")
    if content is None:
        content = ""
    if isinstance(content, str):
        raw_parts: list[Any] = [{"type": "text", "text": content}] if content else []
    elif isinstance(content, list):
        raw_parts = content
    else:
        raise ValidationError({f"{where}.content": ["A string or a list of parts."]})
    parts, texts, image_urls = [], [], []
    for index, part in enumerate(raw_parts):
        stored, text, url = _part_normalize(part, f"{where}.content.{index}")
        parts.append(stored)
        if text:
            texts.append(text)
        if url:
            image_urls.append(url)
    text = "\n".join(texts)
    if len(text) > settings.MESSAGE_MAX_CHARS:
        raise ValidationError(
            {
                f"{where}.content": [
                    f"At most {settings.MESSAGE_MAX_CHARS} characters of text ({len(text)} sent)."
                ]
            }
        )
    name = _name_check(raw.get("name"), f"{where}.name")
    tool_call_id = _name_check(raw.get("tool_call_id"), f"{where}.tool_call_id")
    return MessageInput(
        role=role,
        parts=parts,
        text=text,
        tool_calls=_tool_calls_normalize(raw.get("tool_calls"), f"{where}.tool_calls"),
        name=name,
        tool_call_id=tool_call_id,
        image_urls=image_urls,
    )


def message_schema(*, roles: tuple[str, ...]) -> dict[str, Any]:
    """The JSON schema of one message as ``message_normalize`` takes it, for the OpenAPI
    schema. What it cannot say: the text of a message's parts together is at most
    ``MESSAGE_MAX_CHARS`` characters."""
    max_chars = settings.MESSAGE_MAX_CHARS
    image_url = {"type": "string", "pattern": IMAGE_URL_PATTERN}
    part_text = {
        "type": "object",
        "required": ["type", "text"],
        "properties": {
            "type": {"enum": ["text"]},
            "text": {"type": "string", "maxLength": max_chars},
        },
    }
    part_image_url = {
        "type": "object",
        "required": ["type", "image_url"],
        "properties": {
            "type": {"enum": ["image_url"]},
            "image_url": {
                "oneOf": [
                    {"type": "object", "required": ["url"], "properties": {"url": image_url}},
                    image_url,
                ]
            },
        },
    }
    part_image = {
        "type": "object",
        "required": ["type", "image_id"],
        "properties": {
            "type": {"enum": ["image"]},
            "image_id": {"type": "string", "pattern": IMAGE_ID_PATTERN},
        },
    }
    tool_call = {
        "type": "object",
        "required": ["function"],
        "properties": {
            "function": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string"},
                    "arguments": {"oneOf": [{"type": "string"}, {"type": "object"}]},
                },
            }
        },
    }
    name = {"type": "string", "nullable": True, "maxLength": MAX_NAME_CHARS}
    return {
        "type": "object",
        "required": ["role"],
        "properties": {
            "role": {"enum": list(roles)},
            "content": {
                "oneOf": [
                    {"type": "string", "nullable": True, "maxLength": max_chars},
                    {"type": "array", "items": {"oneOf": [part_text, part_image_url, part_image]}},
                ],
                "description": "text, or a list of parts; file_uri parts and file: URLs are "
                f"refused; at most {max_chars} characters of text in all",
            },
            "tool_calls": {
                "type": "array",
                "nullable": True,
                "maxItems": MAX_TOOL_CALLS,
                "items": tool_call,
            },
            "name": name,
            "tool_call_id": name,
        },
    }
