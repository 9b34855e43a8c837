"""Turning a batch of chat messages into proposed memories.

Two extractors with one output, a list of ``Proposal``: the deterministic one (no LLM: episodic
events per exchange, plus the links, files and sensitive values it can recognize) and the LLM
one (one structured-output call per batch proposing all six types). Storing the proposals is
``memory.services.records.memories_store``'s job.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from memory.providers.llm import LLMProvider
from sessions.models import Message

logger = logging.getLogger(__name__)

SUMMARY_CHARS = 300
# An episode carries the end of the turn it answers, up to this many characters (see _context).
CONTEXT_CHARS = 200
REDACTED = "[secret kept in the knowledge vault]"


@dataclass
class Proposal:
    """One memory to store (or, for ``core``, one block to update), with the message ids it
    came from."""

    memory_type: str
    fields: dict[str, Any]
    source_message_ids: list[int]
    occurred_at: datetime | None = None
    filter_tags: dict[str, Any] = field(default_factory=dict)


@dataclass
class ExtractionOutcome:
    proposals: list[Proposal]
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


def _speaker(message: Message) -> str:
    return message.name or message.role


def _shorten(text: str, limit: int = SUMMARY_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


# --- What the deterministic extractor recognizes -----------------------------------------------

_URL = re.compile(r"\bhttps?://[^\s<>\"'`)\]]+", re.IGNORECASE)
_FILE = re.compile(
    r"(?<![\w/.@-])((?:[\w.-]+/)*[\w-][\w.-]*\.(?:pdf|docx?|xlsx?|pptx?|csv|tsv|txt|md|rst|py|js|ts|"
    r"tsx|jsx|go|rs|java|rb|php|c|cpp|h|sql|json|ya?ml|toml|ini|cfg|log|html|css|ipynb|png|jpe?g|"
    r"gif|svg|webp|zip|tar|gz|mp3|mp4|wav))\b",
    re.IGNORECASE,
)
_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
_PHONE = re.compile(r"(?<![\w+])\+?\d[\d\s().-]{7,}\d(?!\w)")
_SECRETS: list[tuple[str, re.Pattern[str]]] = [
    ("api_key", re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}")),
    ("api_key", re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,}\b")),
    ("api_key", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{40,}\b")),
    ("api_key", re.compile(r"\bAKIA[0-9A-Z]{16}\b")),
    ("api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    ("api_key", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b")),
    ("api_key", re.compile(r"\bmxk_[0-9a-f]{16}_[A-Za-z0-9]{40}\b")),
    ("password", re.compile(r"(?i)\b(?:password|passcode|passwd|pin)\s*(?:is|:|=)\s*(\S{4,})")),
]


def _secrets_in(text: str) -> list[tuple[str, str]]:
    found = []
    for kind, pattern in _SECRETS:
        for match in pattern.finditer(text):
            found.append((kind, match.group(match.lastindex or 0)))
    return found


def _redact(text: str) -> str:
    for _kind, value in _secrets_in(text):
        text = text.replace(value, REDACTED)
    return text


def _sentence_around(text: str, needle: str) -> str:
    start = text.find(needle)
    if start < 0:
        return _shorten(text)
    left = max(text.rfind(".", 0, start), text.rfind("\n", 0, start)) + 1
    right_candidates = [i for i in (text.find(". ", start), text.find("\n", start)) if i >= 0]
    right = min(right_candidates) + 1 if right_candidates else len(text)
    return _shorten(text[left:right].strip())


def _exchanges(messages: list[Message]) -> list[list[Message]]:
    """Consecutive turns of one session, each starting at a user turn (system turns left out)."""
    exchanges: list[list[Message]] = []
    for message in messages:
        if message.role == Message.Role.SYSTEM:
            continue
        current = exchanges[-1] if exchanges else None
        starts_new = (
            current is None
            or message.session_id != current[0].session_id
            or (message.role == Message.Role.USER and current[-1].role != Message.Role.USER)
        )
        if starts_new:
            exchanges.append([message])
        else:
            current.append(message)
    return exchanges


def _line(message: Message) -> str:
    text = message.text
    if message.tool_calls:
        calls = ", ".join(
            str((call.get("function") or {}).get("name")) for call in message.tool_calls
        )
        text = f"{text} [calls {calls}]".strip()
    if message.role == Message.Role.TOOL and message.name:
        return f"tool {message.name}: {text}"
    return f"{_speaker(message)}: {text}"


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _context(before: Message | None) -> str | None:
    """What an exchange answers: the last sentences (at most CONTEXT_CHARS) of the turn before
    it, where the question or remark it replies to usually is. A reply without it is half an
    event ("Caroline: a sunset, last week"), and a search for what was asked misses it."""
    if before is None or before.role not in (Message.Role.USER, Message.Role.ASSISTANT):
        return None
    text = " ".join(before.text.split())
    if not text:
        return None
    context = ""
    for sentence in reversed(_SENTENCE_END.split(text)):
        longer = f"{sentence} {context}" if context else sentence
        if context and len(longer) > CONTEXT_CHARS:
            break
        context = longer
    if len(context) > CONTEXT_CHARS:  # the last sentence alone is longer: its end
        context = "…" + context[-(CONTEXT_CHARS - 1) :].lstrip()
    return f"{_speaker(before)}: {context}"


def _episodic(exchange: list[Message], before: Message | None = None) -> Proposal | None:
    lines = [_line(message) for message in exchange if message.text or message.tool_calls]
    if not lines:
        return None
    context = _context(before)
    if context is not None:
        lines.insert(0, f"(replying to {context})")
    opener = exchange[0]
    summary_source = next((message for message in exchange if message.text), opener)
    return Proposal(
        memory_type="episodic",
        fields={
            "event_type": "conversation",
            "summary": _redact(_shorten(f"{_speaker(summary_source)}: {summary_source.text}")),
            "details": _redact("\n".join(lines)),
            "actor": _speaker(opener),
        },
        source_message_ids=[message.pk for message in exchange],
        occurred_at=opener.occurred_at,
        filter_tags=opener.filter_tags,
    )


def _resources(message: Message) -> list[Proposal]:
    proposals = []
    seen: set[str] = set()
    for found in _URL.findall(message.text):
        url = found.rstrip(".,;:!?")
        if url in seen:
            continue
        seen.add(url)
        parts = urlsplit(url)
        proposals.append(
            Proposal(
                memory_type="resource",
                fields={
                    "title": _shorten(f"{parts.netloc}{parts.path}", 200),
                    "summary": _redact(_sentence_around(message.text, url)),
                    "content": _redact(message.text),
                    "resource_type": "link",
                    "uri": url,
                },
                source_message_ids=[message.pk],
                occurred_at=message.occurred_at,
                filter_tags=message.filter_tags,
            )
        )
    text_without_urls = _URL.sub(" ", message.text)
    for path in dict.fromkeys(_FILE.findall(text_without_urls)):
        if _EMAIL.search(path):
            continue
        proposals.append(
            Proposal(
                memory_type="resource",
                fields={
                    "title": path,
                    "summary": _redact(_sentence_around(message.text, path)),
                    "content": _redact(message.text),
                    "resource_type": "file",
                    "uri": "",
                },
                source_message_ids=[message.pk],
                occurred_at=message.occurred_at,
                filter_tags=message.filter_tags,
            )
        )
    for part in message.content or []:
        url = (
            (part.get("image_url") or {}).get("url", "") if part.get("type") == "image_url" else ""
        )
        image_id = part.get("image_id", "") if part.get("type") == "image" else ""
        if not (url or image_id):
            continue
        remote = url.startswith(("http://", "https://"))
        proposals.append(
            Proposal(
                memory_type="resource",
                fields={
                    "title": _shorten(url, 200) if remote else f"image {image_id[:12] or 'inline'}",
                    "summary": _shorten(f"Image shared by {_speaker(message)}. {message.text}"),
                    "content": message.text,
                    "resource_type": "image",
                    "uri": url if remote else (f"image:{image_id}" if image_id else ""),
                },
                source_message_ids=[message.pk],
                occurred_at=message.occurred_at,
                filter_tags=message.filter_tags,
            )
        )
    return proposals


def _vault_items(message: Message) -> list[Proposal]:
    found: list[tuple[str, str, str]] = []  # (entry type, value, sensitivity)
    for kind, value in _secrets_in(message.text):
        found.append((kind, value, "high"))
    for email in _EMAIL.findall(message.text):
        found.append(("email", email, "medium"))
    for phone in _PHONE.findall(message.text):
        digits = re.sub(r"\D", "", phone)
        if 9 <= len(digits) <= 15:
            found.append(("phone", phone.strip(), "medium"))
    captions = {
        "api_key": "API key",
        "password": "Password",
        "email": "Email address",
        "phone": "Phone number",
    }
    proposals = []
    for kind, value, sensitivity in dict.fromkeys(found):
        proposals.append(
            Proposal(
                memory_type="knowledge_vault",
                fields={
                    "entry_type": kind,
                    "caption": f"{captions[kind]} shared by {_speaker(message)}: "
                    + _redact(_sentence_around(message.text, value)).replace(value, f"<{kind}>"),
                    "secret_value": value,
                    "sensitivity": sensitivity,
                    "source": f"{message.role} message",
                },
                source_message_ids=[message.pk],
                occurred_at=message.occurred_at,
                filter_tags=message.filter_tags,
            )
        )
    return proposals


def extract_deterministic(
    messages: list[Message], preceding: dict[int, Message] | None = None
) -> ExtractionOutcome:
    """Episodic events (who said what, when, in reply to what) for each exchange, plus the
    links, files, images and sensitive values the text shows. Secrets found are redacted from
    the other memories. ``preceding``: per session, the turn before the first of these (from
    an earlier batch), which the session's first exchange here replies to."""
    proposals: list[Proposal] = []
    last = dict(preceding or {})
    for exchange in _exchanges(messages):
        episodic = _episodic(exchange, before=last.get(exchange[0].session_id))
        last[exchange[0].session_id] = exchange[-1]
        if episodic is not None:
            proposals.append(episodic)
    for message in messages:
        if message.role in (Message.Role.USER, Message.Role.ASSISTANT):
            proposals.extend(_resources(message))
            proposals.extend(_vault_items(message))
    return ExtractionOutcome(proposals=proposals)


# --- The LLM extractor ---------------------------------------------------------------------------

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

EXTRACTION_SYSTEM = """You maintain the long-term memory of an AI assistant about one user.
From the new conversation turns, propose memories of six kinds:
- core: short lasting facts about the user (label "human") or how the assistant should behave
  ("persona"); "append" adds a line, "replace" rewrites the block.
- episodic: events with who did what and when ("summary" one sentence, "details" the specifics).
- semantic: facts and concepts independent of time (people, places, preferences, knowledge).
- procedural: how-to knowledge as ordered steps (workflows that worked, fixes for errors).
- resource: documents, files, links, code or images the user shared or worked with.
- knowledge_vault: sensitive values (credentials, account numbers, contact details), with a
  caption that does not repeat the value.
Cite for every memory the ids of the turns it comes from (the numbers in [brackets]).
Propose nothing that the turns do not support; leave a list empty when nothing fits.
Never copy a secret value anywhere except knowledge_vault.secret_value."""


def _prompt(messages: list[Message]) -> str:
    lines = []
    for message in messages:
        when = message.occurred_at.isoformat(timespec="minutes")
        lines.append(f"[{message.pk}] ({when}) {_line(message)}")
    return "New conversation turns:\n" + "\n".join(lines)


def _text(value: Any, limit: int) -> str:
    return str(value).strip()[:limit] if value is not None else ""


def _steps(value: Any) -> list[str]:
    steps = value if isinstance(value, list) else []
    return [_text(step, 2000) for step in steps if _text(step, 2000)][:100]


def _choice(value: Any, choices: set[str], default: str) -> str:
    return value if value in choices else default


# Per type: how to read an item's fields, and which of them must not be empty.
_LLM_FIELDS: dict[str, tuple[Any, tuple[str, ...]]] = {
    "core": (
        lambda item: {
            "label": _choice(item.get("label"), {"human", "persona"}, ""),
            "value": _text(item.get("value"), 5000),
            "mode": _choice(item.get("mode"), {"append", "replace"}, "append"),
        },
        ("label", "value"),
    ),
    "episodic": (
        lambda item: {
            "event_type": _text(item.get("event_type") or "conversation", 64),
            "summary": _text(item.get("summary"), 2000),
            "details": _text(item.get("details"), 20000),
            "actor": _text(item.get("actor"), 255),
        },
        ("summary",),
    ),
    "semantic": (
        lambda item: {
            "name": _text(item.get("name"), 255),
            "summary": _text(item.get("summary"), 5000),
            "details": _text(item.get("details"), 20000),
            "source": _text(item.get("source"), 255),
        },
        ("name", "summary"),
    ),
    "procedural": (
        lambda item: {
            "entry_type": _text(item.get("entry_type") or "workflow", 64),
            "summary": _text(item.get("summary"), 5000),
            "steps": _steps(item.get("steps")),
        },
        ("summary",),
    ),
    "resource": (
        lambda item: {
            "title": _text(item.get("title"), 500),
            "summary": _text(item.get("summary"), 5000),
            "content": _text(item.get("content"), 65536),
            "resource_type": _text(item.get("resource_type") or "document", 32),
            "uri": _text(item.get("uri"), 2000),
        },
        ("title",),
    ),
    "knowledge_vault": (
        lambda item: {
            "entry_type": _text(item.get("entry_type") or "credential", 64),
            "caption": _text(item.get("caption"), 2000),
            "secret_value": _text(item.get("secret_value"), 10000),
            # An unlabeled secret is treated as the most sensitive kind.
            "sensitivity": _choice(item.get("sensitivity"), {"low", "medium", "high"}, "high"),
            "source": _text(item.get("source"), 255),
        },
        ("caption", "secret_value"),
    ),
}


def _llm_item_fields(memory_type: str, item: dict[str, Any]) -> dict[str, Any] | None:
    """The storable fields of one proposed item, or None when it lacks what the type needs."""
    read, required = _LLM_FIELDS[memory_type]
    fields = read(item)
    return fields if all(fields[name] for name in required) else None


def extract_with_llm(messages: list[Message], provider: LLMProvider) -> ExtractionOutcome:
    """One structured-output call for the whole batch. Items that cite no known turn are
    attributed to the whole batch; items missing what their type needs are dropped."""
    result = provider.structured(
        system=EXTRACTION_SYSTEM,
        prompt=_prompt(messages),
        schema=EXTRACTION_SCHEMA,
        schema_name="memory_proposals",
    )
    by_id = {message.pk: message for message in messages}
    proposals = []
    for memory_type in EXTRACTION_SCHEMA["required"]:
        items = result.data.get(memory_type) or []
        if not isinstance(items, list):
            continue
        for item in items:
            if not isinstance(item, dict):
                continue
            fields = _llm_item_fields(memory_type, item)
            if fields is None:
                logger.info(
                    "dropped an unusable %s proposal: %s", memory_type, json.dumps(item)[:200]
                )
                continue
            cited = [
                int(source)
                for source in item.get("source_message_ids") or []
                if isinstance(source, int | str) and str(source).isdigit() and int(source) in by_id
            ]
            sources = cited or list(by_id)
            first = by_id[min(sources)]
            proposals.append(
                Proposal(
                    memory_type=memory_type,
                    fields=fields,
                    source_message_ids=sorted(set(sources)),
                    occurred_at=first.occurred_at,
                    filter_tags=first.filter_tags,
                )
            )
    return ExtractionOutcome(
        proposals=proposals,
        llm_calls=1,
        input_tokens=result.input_tokens or 0,
        output_tokens=result.output_tokens or 0,
    )
