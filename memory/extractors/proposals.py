"""What an extractor produces: proposed memories, and what producing them cost."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from mirix_site.jsonvalues import strings_mapped
from sessions.sensitive import sensitive_redacted

REDACTED = "[secret kept in the knowledge vault]"
# The one field a sensitive value may be stored in: the vault's, encrypted.
_SECRET_FIELD = "secret_value"  # noqa: S105 (a field name)


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


def proposal_redacted(proposal: Proposal) -> Proposal:
    """``proposal`` with every sensitive value (``sessions.sensitive``) in its text replaced
    by ``REDACTED``, except a vault item's own secret: what every extractor's output goes
    through before it is stored, so that no memory but the vault holds one."""
    fields = {
        name: value if name == _SECRET_FIELD else strings_mapped(value, _redacted)
        for name, value in proposal.fields.items()
    }
    return replace(proposal, fields=fields)


def _redacted(text: str) -> str:
    return sensitive_redacted(text, REDACTED)
