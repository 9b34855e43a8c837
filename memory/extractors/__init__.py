"""Turning a batch of chat messages into proposed memories.

Two extractors with one output, a list of ``Proposal``: the deterministic one (no LLM: episodic
events per exchange, plus the links, files and sensitive values it can recognize) and the LLM
one (one structured-output call per batch proposing all six types). Storing the proposals is
``memory.services.records.memories_store``'s job.
"""

from __future__ import annotations

from memory.extractors.deterministic import (
    CONTEXT_CHARS,
    EpisodeBounds,
    exchange_continues,
    extract_deterministic,
)
from memory.extractors.llm import extract_with_llm
from memory.extractors.proposals import (
    ExtractionOutcome,
    Proposal,
    proposal_redacted,
    proposals_known,
)

__all__ = [
    "CONTEXT_CHARS",
    "EpisodeBounds",
    "ExtractionOutcome",
    "Proposal",
    "exchange_continues",
    "extract_deterministic",
    "extract_with_llm",
    "proposal_redacted",
    "proposals_known",
]
