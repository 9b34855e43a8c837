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
from memory.models.search import (
    DocumentStats,
    EmbeddingSpace,
    GateCalibration,
    MemoryPosting,
    RetrievalLog,
    TermStats,
)

__all__ = [
    "CoreMemoryBlock",
    "DocumentStats",
    "EmbeddingSpace",
    "EpisodicEmbedding",
    "EpisodicMemory",
    "ExtractionJob",
    "GateCalibration",
    "KnowledgeVaultItem",
    "MemoryPosting",
    "MetaAgent",
    "ProceduralEmbedding",
    "ProceduralMemory",
    "ResourceEmbedding",
    "ResourceMemory",
    "RetrievalLog",
    "SemanticEmbedding",
    "SemanticMemory",
    "TermStats",
    "VaultEmbedding",
]
