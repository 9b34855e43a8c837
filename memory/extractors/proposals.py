"""What an extractor produces: proposed memories, and what producing them cost."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from memory.tags import tags_distinct, tags_shared, turn_tags_of
from sessions.sensitive import Found, sensitive_known, sensitive_redacted_json

# The one field a sensitive value may be stored in: the vault's, encrypted.
_SECRET_FIELD = "secret_value"  # noqa: S105 (a field name)


@dataclass
class Proposal:
    """One memory to store (or, for ``core``, one block to update), with the message ids it
    came from, the tags all of them carry (``filter_tags``) and each distinct tag object among
    them (``turn_tags``; None: ``filter_tags`` alone, the turns' tags being one). See
    ``memory.tags``; ``Proposal.of_turns`` sets both from the turns."""

    memory_type: str
    fields: dict[str, Any]
    source_message_ids: list[int]
    occurred_at: datetime | None = None
    filter_tags: dict[str, Any] = field(default_factory=dict)
    turn_tags: list[dict[str, Any]] | None = None
    # An imported memory's id in its client's own system: what makes it the same memory when
    # sent again, edited or not (``memory.services.records``); None: its type, fields and
    # sources do.
    client_memory_id: str | None = None

    @classmethod
    def of_turns(cls, memory_type: str, fields: dict[str, Any], turns: Sequence[Any]) -> Proposal:
        """A memory citing ``turns`` (messages, oldest first): from when the first was said,
        with their tags."""
        tag_sets = [turn.filter_tags for turn in turns]
        return cls(
            memory_type=memory_type,
            fields=fields,
            source_message_ids=[turn.pk for turn in turns],
            occurred_at=turns[0].occurred_at,
            filter_tags=tags_shared(tag_sets),
            turn_tags=tags_distinct(tag_sets),
        )

    def tags_per_turn(self) -> list[dict[str, Any]]:
        """The memory's ``turn_tags``, what a search's tag filter matches."""
        return turn_tags_of(self.turn_tags, self.filter_tags)


@dataclass
class ExtractionOutcome:
    proposals: list[Proposal]
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


def proposal_redacted(proposal: Proposal, *, known: Sequence[Found] = ()) -> Proposal:
    """``proposal`` with every sensitive value (``sessions.sensitive``) in its text replaced
    by its kind's placeholder (``<email>``), except a vault item's own secret: what every
    extractor's output goes through before it is stored, so that no memory but the vault
    holds one. ``known``: values found elsewhere (the turns, the vault items of the batch),
    redacted wherever they reappear. Redacting what was redacted changes nothing."""
    fields = {
        name: value if name == _SECRET_FIELD else sensitive_redacted_json(value, known=known)
        for name, value in proposal.fields.items()
    }
    return replace(proposal, fields=fields)


def proposals_known(turns: Sequence[Any], proposals: Sequence[Proposal]) -> list[Found]:
    """The sensitive values of a batch: found in its turns' text and tool calls, and every
    secret a vault item holds (an LLM may repeat one bare in another memory)."""
    vault = [
        Found.given(str(proposal.fields.get("entry_type", "")), value)
        for proposal in proposals
        if proposal.memory_type == "knowledge_vault"
        and isinstance(value := proposal.fields.get(_SECRET_FIELD), str)
        and value
    ]
    return (
        sensitive_known([turn.text for turn in turns] + [turn.tool_calls for turn in turns]) + vault
    )
