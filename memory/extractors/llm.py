"""The LLM extractor: one structured-output call per batch, proposing memories of all six types."""

from __future__ import annotations

import json
import logging
from typing import Any

from memory.extractors.prompt import extraction_prompt, extraction_system
from memory.extractors.proposals import ExtractionOutcome, Proposal
from memory.extractors.schema import EXTRACTION_SCHEMA
from mirix_site.providers.llm import LLMProvider
from sessions.models import Message

logger = logging.getLogger(__name__)


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


def extract_with_llm(
    messages: list[Message], provider: LLMProvider, agent_prompts: dict[str, str] | None = None
) -> ExtractionOutcome:
    """One structured-output call for the whole batch, with the client's ``agent_prompts``
    (``extraction_system``). Items that cite no known turn are attributed to the whole batch;
    items missing what their type needs are dropped."""
    result = provider.structured(
        system=extraction_system(agent_prompts or {}),
        prompt=extraction_prompt(messages),
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
