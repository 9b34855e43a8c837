"""The memory types, in one table: their models, the text each is searched and embedded by,
and the fields a caller may edit. Everything that handles "any memory type" reads this."""

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


@dataclass(frozen=True)
class MemoryType:
    name: str
    code: int  # its number in the search index's tables
    model: type[models.Model]
    embedding_model: (
        type[models.Model] | None
    )  # None: core blocks are returned whole, never searched
    text_fields: tuple[str, ...]  # what search and embeddings read, in this order
    editable_fields: tuple[str, ...]


MEMORY_TYPES: dict[str, MemoryType] = {
    "core": MemoryType("core", 0, CoreMemoryBlock, None, ("label", "value"), ("value", "limit")),
    "episodic": MemoryType(
        "episodic",
        1,
        EpisodicMemory,
        EpisodicEmbedding,
        ("summary", "details"),
        ("event_type", "summary", "details", "actor", "occurred_at"),
    ),
    "semantic": MemoryType(
        "semantic",
        2,
        SemanticMemory,
        SemanticEmbedding,
        ("name", "summary", "details"),
        ("name", "summary", "details", "source"),
    ),
    "procedural": MemoryType(
        "procedural",
        3,
        ProceduralMemory,
        ProceduralEmbedding,
        ("summary", "steps"),
        ("entry_type", "summary", "steps"),
    ),
    "resource": MemoryType(
        "resource",
        4,
        ResourceMemory,
        ResourceEmbedding,
        ("title", "summary", "content"),
        ("title", "summary", "content", "resource_type", "uri"),
    ),
    # The secret value is never searchable or embedded: only its caption is.
    "knowledge_vault": MemoryType(
        "knowledge_vault",
        5,
        KnowledgeVaultItem,
        VaultEmbedding,
        ("caption",),
        ("entry_type", "caption", "secret_value", "sensitivity", "source"),
    ),
}
SEARCHABLE_TYPES = tuple(name for name, kind in MEMORY_TYPES.items() if kind.embedding_model)
# Names the MIRIX client uses for the same types.
TYPE_ALIASES = {"knowledge": "knowledge_vault", "knowledge_vault_memory": "knowledge_vault"}


def memory_type_resolve(name: str) -> MemoryType | None:
    return MEMORY_TYPES.get(TYPE_ALIASES.get(name, name))


def memory_text(kind: MemoryType, row: models.Model) -> str:
    """The text a memory is searched and embedded by: its text fields in order, leaving out a
    field whose text another field already holds (an episode's summary is usually the first
    line of its details), so that neither BM25 nor the embedding counts it twice."""
    values = []
    for field in kind.text_fields:
        value = getattr(row, field)
        if isinstance(value, list):
            value = "\n".join(str(item) for item in value)
        if value:
            values.append(str(value))
    kept = [
        value
        for index, value in enumerate(values)
        if not any(value.rstrip("…") in other for other in values[index + 1 :])
    ]
    return "\n".join(kept)
