"""The LLM extractor: one structured-output call per batch, proposing memories of all six types."""

from __future__ import annotations

import json
import logging
from typing import Any

from memory.extractors.prompt import extraction_prompt, extraction_system
from memory.extractors.proposals import ExtractionOutcome, Proposal
from memory.extractors.schema import EXTRACTION_SCHEMA
from memory.types import MEMORY_TYPES, Field
from mirix_site.providers.llm import LLMProvider
from sessions.models import Message

logger = logging.getLogger(__name__)


def _text(value: Any, limit: int | None) -> str:
    return str(value).strip()[:limit] if value is not None else ""


def _steps(value: Any) -> list[str]:
    steps = value if isinstance(value, list) else []
    return [_text(step, 2000) for step in steps if _text(step, 2000)][:100]


def _choice(value: Any, choices: set[str], default: str) -> str:
    # A model may answer a list or an object where a word was asked: the default, not a crash.
    return value if isinstance(value, str) and value in choices else default


def _read(field: Field, value: Any) -> Any:
    """One proposed value as the type's field keeps it (``memory.types``)."""
    if field.kind == "choice":
        return _choice(value, set(field.choices), field.default)
    if field.kind == "steps":
        return _steps(value)
    if field.default and not value:
        value = field.default
    return _text(value, field.max_chars)


def proposed_fields(memory_type: str, item: dict[str, Any]) -> dict[str, Any] | None:
    """The storable fields of one proposed item (an LLM's, an import line's), or None when it
    lacks what the type needs."""
    fields = MEMORY_TYPES[memory_type].extracted_fields
    read = {field.name: _read(field, item.get(field.name)) for field in fields}
    return read if all(read[field.name] for field in fields if field.required) else None


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
            fields = proposed_fields(memory_type, item)
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
            turns = [by_id[source] for source in sorted(set(sources))]
            proposals.append(Proposal.of_turns(memory_type, fields, turns))
    return ExtractionOutcome(
        proposals=proposals,
        llm_calls=1,
        input_tokens=result.input_tokens or 0,
        output_tokens=result.output_tokens or 0,
    )
