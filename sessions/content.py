"""The message format callers send, checked and normalized before anything is stored.

Content is a string or a list of parts: ``{"type": "text", "text"}``, ``{"type": "image_url",
"image_url": {"url": "https://… | data:image/…"}}`` or ``{"type": "image", "image_id": sha256}``.
A ``file_uri`` part or any ``file:`` URL is refused: the server never reads its own files for a
caller. Errors are ``ValidationError``s keyed by the part's path, e.g. ``content.1.image_url``.

An inline (``data:``) image is decoded and validated here, before anything is stored, and its
part becomes an ``image`` part naming the stored bytes' hash: the message keeps a reference,
not megabytes of base64. A remote URL is checked for what can be refused without a lookup (its
scheme, credentials, an address spelled in it); the worker vets where it really leads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from images.sources import IMAGE_ID_PATTERN, IMAGE_URL_PATTERN, image_source_read
from images.validation import ValidImage

MAX_TOOL_CALLS = 128
MAX_NAME_CHARS = 255
# A turn's id in the client's own system: no control character (C0, DEL, C1), no U+FFFD (what
# the JSON parser puts for a NUL), no space at either end.
_ID_CHAR = "[^\\u0000-\\u001F\\u007F-\\u009F\\uFFFD]"
_ID_EDGE = "[^\\u0000-\\u001F\\u007F-\\u009F\\uFFFD ]"
CLIENT_MESSAGE_ID_PATTERN = f"^{_ID_EDGE}(?:{_ID_CHAR}{{0,{MAX_NAME_CHARS - 2}}}{_ID_EDGE})?$"
CLIENT_ID_INVALID = (
    f"1 to {MAX_NAME_CHARS} characters, without a control character or a space at either end."
)
MAX_TOOL_DEFINITIONS = 128
MAX_TOOL_DESCRIPTION_CHARS = 4096
_IMAGE_ID = re.compile(IMAGE_ID_PATTERN)


@dataclass
class MessageInput:
    """One validated turn, ready to store."""

    role: str
    parts: list[dict[str, Any]]
    text: str
    tool_calls: list[dict[str, Any]] | None = None
    name: str = ""
    tool_call_id: str = ""
    # The caller's own id of the turn: a turn sent again with it is stored once (see
    # ``sessions.services.messages_add``); "" when not given.
    client_message_id: str = ""
    # When the turn was said, if the caller gave it for this turn alone (an import's line);
    # otherwise the call's time.
    occurred_at: datetime | None = None
    # The remote image URLs, in order (their parts keep them), to fetch once stored.
    image_urls: list[str] = field(default_factory=list)
    # The inline images, validated, by the SHA-256 their ``image`` parts now name.
    inline_images: dict[str, ValidImage] = field(default_factory=dict)

    @property
    def image_ids(self) -> list[str]:
        """The hashes of the images the message shows (inline or named), in order."""
        return [part["image_id"] for part in self.parts if part["type"] == "image"]


def _part_normalize(part: Any, where: str, message: MessageInput) -> tuple[dict[str, Any], str]:
    """(stored part, its text); images found are added to ``message``."""
    if not isinstance(part, dict):
        raise ValidationError({where: ["A content part must be an object with a type."]})
    kind = part.get("type")
    if kind == "text":
        text = part.get("text")
        if not isinstance(text, str):
            raise ValidationError({f"{where}.text": ["Must be a string."]})
        return {"type": "text", "text": text}, text
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        source = image_source_read(url, where=f"{where}.image_url")
        if source.url is None:
            message.inline_images[source.sha256] = source.image
            return {"type": "image", "image_id": source.sha256}, ""
        message.image_urls.append(source.url)
        return {"type": "image_url", "image_url": {"url": source.url}}, ""
    if kind == "image":
        image_id = part.get("image_id")
        if not isinstance(image_id, str) or not _IMAGE_ID.fullmatch(image_id):
            raise ValidationError(
                {f"{where}.image_id": ["Must be the image's sha256 (64 hex characters)."]}
            )
        return {"type": "image", "image_id": image_id}, ""
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


def tools_normalize(raw: Any, where: str = "tools") -> dict[str, str]:
    """The tools a task session's agent declared, name → what the tool does: a list of tool
    definitions as the chat APIs take them, OpenAI's ``{"type": "function", "function": {name,
    description, parameters}}`` or Anthropic's and MCP's ``{name, description, input_schema}``.
    Only the name and the description are kept (skill learning reads what a tool is for)."""
    if raw is None:
        return {}
    if not isinstance(raw, list) or len(raw) > MAX_TOOL_DEFINITIONS:
        raise ValidationError(
            {where: [f"A list of at most {MAX_TOOL_DEFINITIONS} tool definitions."]}
        )
    tools: dict[str, str] = {}
    for index, definition in enumerate(raw):
        if not isinstance(definition, dict):
            raise ValidationError({f"{where}.{index}": ["A tool definition must be an object."]})
        # OpenAI's definition holds the tool in "function"; the others are the tool.
        spec, at = definition, f"{where}.{index}"
        if isinstance(definition.get("function"), dict):
            spec, at = definition["function"], f"{at}.function"
        name = spec.get("name")
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS:
            raise ValidationError(
                {f"{at}.name": [f"The tool's name: 1-{MAX_NAME_CHARS} characters."]}
            )
        description = spec.get("description")
        if description is None:
            description = ""
        if not isinstance(description, str) or len(description) > MAX_TOOL_DESCRIPTION_CHARS:
            raise ValidationError(
                {
                    f"{at}.description": [
                        f"A string of at most {MAX_TOOL_DESCRIPTION_CHARS} characters."
                    ]
                }
            )
        tools[name] = " ".join(description.split())
    return tools


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
    message = MessageInput(role=role, parts=[], text="")
    texts = []
    for index, part in enumerate(raw_parts):
        stored, text = _part_normalize(part, f"{where}.content.{index}", message)
        message.parts.append(stored)
        if text:
            texts.append(text)
    text = "\n".join(texts)
    if len(text) > settings.MESSAGE_MAX_CHARS:
        raise ValidationError(
            {
                f"{where}.content": [
                    f"At most {settings.MESSAGE_MAX_CHARS} characters of text ({len(text)} sent)."
                ]
            }
        )
    message.text = text
    message.name = _name_check(raw.get("name"), f"{where}.name")
    message.tool_call_id = _name_check(raw.get("tool_call_id"), f"{where}.tool_call_id")
    message.tool_calls = _tool_calls_normalize(raw.get("tool_calls"), f"{where}.tool_calls")
    message.client_message_id = client_message_id_check(
        raw.get("client_message_id"), f"{where}.client_message_id"
    )
    return message


def client_message_id_check(value: Any, where: str) -> str:
    """A turn's own id as its client names it (``CLIENT_MESSAGE_ID_PATTERN``), or none."""
    if value is None:
        return ""
    if not isinstance(value, str) or not re.fullmatch(CLIENT_MESSAGE_ID_PATTERN, value):
        raise ValidationError({where: [CLIENT_ID_INVALID]})
    return value


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
            "client_message_id": {
                "type": "string",
                "nullable": True,
                "minLength": 1,
                "maxLength": MAX_NAME_CHARS,
                "pattern": CLIENT_MESSAGE_ID_PATTERN,
                "description": "the turn's id in the client's own system: a turn sent again "
                "with the same id (a retry, a replayed queue, an import run twice) is stored "
                "once and answered as the first time",
            },
        },
    }
