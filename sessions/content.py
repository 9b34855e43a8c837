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
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_DATA_IMAGE = re.compile(r"^data:image/[a-z0-9.+-]+(;[a-z0-9=.+-]+)*;base64,", re.IGNORECASE)


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
    lowered = url[:16].lower()
    if lowered.startswith("file:"):
        raise ValidationError(
            {where: ["file: URLs are refused: the server never reads its own files."]}
        )
    if lowered.startswith("data:"):
        if not _DATA_IMAGE.match(url[:200]):
            raise ValidationError(
                {where: ["A data: URL must be a base64 image (data:image/...;base64,...)."]}
            )
        return url
    if not lowered.startswith(("https://", "http://")):
        raise ValidationError(
            {where: ["Only https://, http:// and data:image/ URLs are accepted."]}
        )
    return url


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
        if not isinstance(image_id, str) or not _SHA256.fullmatch(image_id):
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
    name = raw.get("name") or ""
    tool_call_id = raw.get("tool_call_id") or ""
    if not isinstance(name, str) or len(name) > 255:
        raise ValidationError({f"{where}.name": ["A string of at most 255 characters."]})
    if not isinstance(tool_call_id, str) or len(tool_call_id) > 255:
        raise ValidationError({f"{where}.tool_call_id": ["A string of at most 255 characters."]})
    return MessageInput(
        role=role,
        parts=parts,
        text=text,
        tool_calls=_tool_calls_normalize(raw.get("tool_calls"), f"{where}.tool_calls"),
        name=name,
        tool_call_id=tool_call_id,
        image_urls=image_urls,
    )
