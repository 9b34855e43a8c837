"""Memory models, one module per concern, re-exported here: the memory types (``records``),
meta agents, extraction jobs and dream runs. The retrieval engine's tables are
``mirix_site.search.models``."""

from __future__ import annotations

from memory.models.agents import AgentPromptVersion, MetaAgent
from memory.models.jobs import DreamRun, ExtractionJob, MemoryImport
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
    "AgentPromptVersion",
    "CoreMemoryBlock",
    "DreamRun",
    "EpisodicEmbedding",
    "EpisodicMemory",
    "ExtractionJob",
    "KnowledgeVaultItem",
    "MemoryImport",
    "MetaAgent",
    "ProceduralEmbedding",
    "ProceduralMemory",
    "ResourceEmbedding",
    "ResourceMemory",
    "SemanticEmbedding",
    "SemanticMemory",
    "VaultEmbedding",
]
