"""Memory models, one module per concern, re-exported here."""

from __future__ import annotations

from memory.models.agents import MetaAgent
from memory.models.jobs import ExtractionJob
from memory.models.records import (
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

__all__ = [
    "CoreMemoryBlock",
    "EpisodicEmbedding",
    "EpisodicMemory",
    "ExtractionJob",
    "KnowledgeVaultItem",
    "MetaAgent",
    "ProceduralEmbedding",
    "ProceduralMemory",
    "ResourceEmbedding",
    "ResourceMemory",
    "SemanticEmbedding",
    "SemanticMemory",
    "VaultEmbedding",
]
