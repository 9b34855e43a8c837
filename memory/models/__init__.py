"""Memory models, one module per concern, re-exported here."""

from __future__ import annotations

from memory.models.agents import MetaAgent

__all__ = ["MetaAgent"]
