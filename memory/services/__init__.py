"""Writes of the memory app, one module per concern, re-exported here."""

from __future__ import annotations

from memory.services.agents import meta_agent_initialize
from memory.services.extraction import (
    extraction_job_requeue,
    extraction_job_run,
    extraction_jobs_recover,
)
from memory.services.ingest import IngestResult, memory_add
from memory.services.records import (
    memories_clear,
    memories_store,
    memory_delete,
    memory_update,
)

__all__ = [
    "IngestResult",
    "extraction_job_requeue",
    "extraction_job_run",
    "extraction_jobs_recover",
    "memories_clear",
    "memories_store",
    "memory_add",
    "memory_delete",
    "memory_update",
    "meta_agent_initialize",
]
