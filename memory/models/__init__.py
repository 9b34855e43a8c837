"""Memory models, one module per concern, re-exported here: the memory types (``records``),
meta agents, extraction jobs, and the retrieval engine's tables (``search``)."""

from __future__ import annotations

from memory.models.agents import AgentPromptVersion, MetaAgent
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
    Embedding,
    EmbeddingSpace,
    GateCalibration,
    Posting,
    RetrievalLog,
    SearchableKindCode,
    TermStats,
)

__all__ = [
    "AgentPromptVersion",
    "CoreMemoryBlock",
    "DocumentStats",
    "Embedding",
    "EmbeddingSpace",
    "EpisodicEmbedding",
    "EpisodicMemory",
    "ExtractionJob",
    "GateCalibration",
    "KnowledgeVaultItem",
    "MetaAgent",
    "Posting",
    "ProceduralEmbedding",
    "ProceduralMemory",
    "ResourceEmbedding",
    "ResourceMemory",
    "RetrievalLog",
    "SearchableKindCode",
    "SemanticEmbedding",
    "SemanticMemory",
    "TermStats",
    "VaultEmbedding",
]
