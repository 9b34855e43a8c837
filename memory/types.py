"""The memory types, in one table: their models, the fields a caller may edit, and for the five
that are searched, their searchable kind (what the retrieval engine reads: code, embeddings
table, text fields, time field), which ``memory.search`` hands to the engine. Everything in
the memory app that handles "any memory type" reads this table."""

from __future__ import annotations

from dataclasses import dataclass

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
from memory.models.records import CURRENT
from mirix_site.search.kinds import SearchableKind


@dataclass(frozen=True)
class MemoryType:
    name: str
    model: type[models.Model]
    editable_fields: tuple[str, ...]
    kind: SearchableKind | None  # None: core blocks are returned whole, never searched


def _searchable(
    name: str,
    code: int,
    model: type[models.Model],
    embedding_model: type[models.Model],
    text_fields: tuple[str, ...],
    **options: str,
) -> SearchableKind:
    return SearchableKind(
        name, code, model, embedding_model, text_fields, current=CURRENT, **options
    )


# Codes are the kinds' numbers in the search index: never change or reuse one.
MEMORY_TYPES: dict[str, MemoryType] = {
    "core": MemoryType("core", CoreMemoryBlock, ("value", "limit"), None),
    "episodic": MemoryType(
        "episodic",
        EpisodicMemory,
        ("event_type", "summary", "details", "actor", "occurred_at"),
        _searchable(
            "episodic",
            1,
            EpisodicMemory,
            EpisodicEmbedding,
            ("summary", "details"),
            time_field="occurred_at",
        ),
    ),
    "semantic": MemoryType(
        "semantic",
        SemanticMemory,
        ("name", "summary", "details", "source"),
        _searchable(
            "semantic", 2, SemanticMemory, SemanticEmbedding, ("name", "summary", "details")
        ),
    ),
    "procedural": MemoryType(
        "procedural",
        ProceduralMemory,
        ("entry_type", "summary", "steps"),
        _searchable("procedural", 3, ProceduralMemory, ProceduralEmbedding, ("summary", "steps")),
    ),
    "resource": MemoryType(
        "resource",
        ResourceMemory,
        ("title", "summary", "content", "resource_type", "uri"),
        _searchable(
            "resource", 4, ResourceMemory, ResourceEmbedding, ("title", "summary", "content")
        ),
    ),
    # The secret value is never searchable or embedded: only its caption is.
    "knowledge_vault": MemoryType(
        "knowledge_vault",
        KnowledgeVaultItem,
        ("entry_type", "caption", "secret_value", "sensitivity", "source"),
        _searchable("knowledge_vault", 5, KnowledgeVaultItem, VaultEmbedding, ("caption",)),
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
