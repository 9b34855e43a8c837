"""The memory types, in one table: each type's model, its fields (what extraction asks for and
keeps, what a PATCH may change), what the extraction prompt says of it, the MIRIX agent that
writes it, and for the five that are searched, their searchable kind (what the retrieval
engine reads: code, embeddings table, text fields, time field), which ``memory.search`` hands
to the engine. Everything in the memory app that handles "any memory type" reads this table:
the extraction schema and field readers, the prompt's list of types, the PATCH serializers,
the MIRIX agent names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import models

from memory.models import (
    CoreMemoryBlock,
    EpisodicEmbedding,
    EpisodicMemory,
    KnowledgeVaultItem,
    ProceduralEmbedding,
    ProceduralMemory,
    ResourceEmbedding,
    ResourceMemory,
    SemanticEmbedding,
    SemanticMemory,
    VaultEmbedding,
)
from memory.models.records import CURRENT, valid_at
from mirix_site.search.kinds import SearchableKind


@dataclass(frozen=True)
class Field:
    """One field of a memory type as everything outside its model reads it: what the LLM
    extractor asks for and keeps, and what a PATCH may change.

    - ``kind``: ``text``, ``choice`` (one of ``choices``), ``steps`` (a list of texts),
      ``time`` or ``count``.
    - ``max_chars``: the characters extraction keeps; a ``CharField``'s ``max_length`` is the
      same number (tests/memory/test_types.py holds them equal).
    - ``default``: what extraction stores for a blank value (for a choice: any other value).
    - ``asked``: the extraction schema requires the model to answer it; ``required``: an
      extracted item without it is dropped.
    - ``extracted``: the model proposes it (``mode`` is the model's alone: how a core value
      is written); ``editable``: a PATCH may change it; ``stored``: a column of the model;
      ``returned``: answers show it (every editable field is shown too).
    """

    name: str
    kind: str = "text"
    max_chars: int | None = None
    choices: tuple[str, ...] = ()
    default: str = ""
    asked: bool = False
    required: bool = False
    extracted: bool = True
    editable: bool = True
    stored: bool = True
    returned: bool = False


@dataclass(frozen=True)
class MemoryType:
    """A memory type, declared once: its model, its fields, what the extraction prompt says
    of it, the MIRIX agent that writes it (``mirix_agent``, and the other names MIRIX's
    configurations give that agent), and for the five that are searched, their searchable
    kind."""

    name: str
    model: type[models.Model]
    fields: tuple[Field, ...]
    kind: SearchableKind | None  # None: core blocks are returned whole, never searched
    description: str
    mirix_agent: str
    mirix_agent_aliases: tuple[str, ...] = ()
    # Whether an extracted item cites the turns it comes from (a core block is edited in
    # place, whatever said it).
    cites_sources: bool = True

    @property
    def editable_fields(self) -> tuple[str, ...]:
        return tuple(field.name for field in self.fields if field.editable)

    @property
    def returned_fields(self) -> tuple[Field, ...]:
        """What a memory of the type shows in an answer."""
        return tuple(field for field in self.fields if field.editable or field.returned)

    @property
    def extracted_fields(self) -> tuple[Field, ...]:
        return tuple(field for field in self.fields if field.extracted)


def _searchable(
    name: str,
    code: int,
    model: type[models.Model],
    embedding_model: type[models.Model],
    text_fields: tuple[str, ...],
    **options: Any,
) -> SearchableKind:
    # A memory search fills its list from the keyword lanes when the gate leaves it short:
    # what the caller asked for, not a shorter list (mirix_site.search.fusion). A tag filter
    # matches a memory one of whose turns carries the tags (memory.tags).
    return SearchableKind(
        name,
        code,
        model,
        embedding_model,
        text_fields,
        current=CURRENT,
        gate_fill=True,
        tags_field="turn_tags",
        tags_listed=True,
        **options,
    )


_OCCURRED_AT = Field("occurred_at", kind="time", extracted=False)
_SENSITIVITIES = ("low", "medium", "high")

# Codes are the kinds' numbers in the search index: never change or reuse one.
MEMORY_TYPES: dict[str, MemoryType] = {
    "core": MemoryType(
        "core",
        CoreMemoryBlock,
        (
            Field(
                "label",
                kind="choice",
                choices=("human", "persona"),
                asked=True,
                required=True,
                editable=False,
            ),
            Field("value", max_chars=5000, asked=True, required=True),
            Field(
                "mode",
                kind="choice",
                choices=("append", "replace"),
                default="append",
                asked=True,
                editable=False,
                stored=False,
            ),
            Field("limit", kind="count", extracted=False),
        ),
        None,
        description='short lasting facts about the user (label "human") or how the assistant '
        'should behave\n  ("persona"); "append" adds a line, "replace" rewrites the block.',
        mirix_agent="core_memory_agent",
        cites_sources=False,
    ),
    "episodic": MemoryType(
        "episodic",
        EpisodicMemory,
        (
            Field("event_type", max_chars=64, default="conversation"),
            Field("summary", max_chars=2000, asked=True, required=True),
            Field("details", max_chars=20000, asked=True),
            Field("actor", max_chars=255, asked=True),
            _OCCURRED_AT,
        ),
        _searchable(
            "episodic",
            1,
            EpisodicMemory,
            EpisodicEmbedding,
            ("summary", "details"),
            time_field="occurred_at",
        ),
        description='events with who did what and when ("summary" one sentence, "details" the '
        "specifics).",
        mirix_agent="episodic_memory_agent",
    ),
    "semantic": MemoryType(
        "semantic",
        SemanticMemory,
        (
            Field("name", max_chars=255, asked=True, required=True),
            Field("summary", max_chars=5000, asked=True, required=True),
            Field("details", max_chars=20000),
            Field("source", max_chars=255),
            # A structured fact's parts (the deterministic extractor's; blank for others): what
            # auto-dream reads to tell a fact a later one contradicts. The LLM is not asked.
            Field("subject", max_chars=255, extracted=False),
            Field("predicate", max_chars=64, extracted=False),
            Field("value", max_chars=500, extracted=False),
            # When the fact was said, and when a later one replaced it (auto-dream's).
            Field("valid_from", kind="time", extracted=False, editable=False, returned=True),
            Field("valid_until", kind="time", extracted=False, editable=False, returned=True),
        ),
        _searchable(
            "semantic",
            2,
            SemanticMemory,
            SemanticEmbedding,
            ("name", "summary", "details"),
            valid_at=valid_at,
        ),
        description="facts and concepts independent of time (people, places, preferences, "
        "knowledge).",
        mirix_agent="semantic_memory_agent",
    ),
    "procedural": MemoryType(
        "procedural",
        ProceduralMemory,
        (
            Field("entry_type", max_chars=64, default="workflow"),
            Field("summary", max_chars=5000, asked=True, required=True),
            Field("steps", kind="steps", asked=True),
        ),
        _searchable("procedural", 3, ProceduralMemory, ProceduralEmbedding, ("summary", "steps")),
        description="how-to knowledge as ordered steps (workflows that worked, fixes for errors).",
        mirix_agent="procedural_memory_agent",
    ),
    "resource": MemoryType(
        "resource",
        ResourceMemory,
        (
            Field("title", max_chars=500, asked=True, required=True),
            Field("summary", max_chars=5000, asked=True),
            Field("content", max_chars=65536),
            Field("resource_type", max_chars=32, default="document"),
            Field("uri", max_chars=2000),
        ),
        _searchable(
            "resource", 4, ResourceMemory, ResourceEmbedding, ("title", "summary", "content")
        ),
        description="documents, files, links, code or images the user shared or worked with.",
        mirix_agent="resource_memory_agent",
    ),
    # The secret value is never searchable or embedded: only its caption is.
    "knowledge_vault": MemoryType(
        "knowledge_vault",
        KnowledgeVaultItem,
        (
            Field("entry_type", max_chars=64, default="credential"),
            Field("caption", max_chars=2000, asked=True, required=True),
            # Stored encrypted (secret_value_encrypted).
            Field("secret_value", max_chars=10000, asked=True, required=True, stored=False),
            # An unlabeled secret is treated as the most sensitive kind.
            Field("sensitivity", kind="choice", choices=_SENSITIVITIES, default="high", asked=True),
            Field("source", max_chars=255),
        ),
        _searchable("knowledge_vault", 5, KnowledgeVaultItem, VaultEmbedding, ("caption",)),
        description="sensitive values (credentials, account numbers, contact details), with a\n"
        "  caption that does not repeat the value.",
        # MIRIX's client knows it as knowledge_memory_agent; its configurations also say
        # knowledge_vault_memory_agent.
        mirix_agent="knowledge_memory_agent",
        mirix_agent_aliases=("knowledge_vault_memory_agent",),
    ),
}
# Names the MIRIX client uses for the same types.
TYPE_ALIASES = {"knowledge": "knowledge_vault", "knowledge_vault_memory": "knowledge_vault"}


def memory_type_resolve(name: str) -> MemoryType | None:
    return MEMORY_TYPES.get(TYPE_ALIASES.get(name, name))


def memory_type_names(*, searchable: bool = False) -> list[str]:
    """Every name a caller may give a memory type by (aliases included), for the API's
    choices; ``searchable``: only the types the retrieval engine searches."""
    names = [*MEMORY_TYPES, *TYPE_ALIASES]
    return [
        name
        for name in names
        if not searchable or memory_type_resolve(name).kind is not None  # type: ignore[union-attr]
    ]
