"""What an extractor produces: proposed memories, and what producing them cost."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


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
