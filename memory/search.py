"""The memory app's searchable kinds: the searched memory types' (``memory.types``, where each
type is declared whole), handed to the engine from ``MemoryConfig.ready()``."""

from __future__ import annotations

from memory.types import MEMORY_TYPES
from mirix_site.search.kinds import SearchableKind, kind_register


def memory_kinds() -> tuple[SearchableKind, ...]:
    """The searchable kinds of the memory types, in the table's order."""
    return tuple(memory_type.kind for memory_type in MEMORY_TYPES.values() if memory_type.kind)


def memory_kinds_register() -> None:
    for kind in memory_kinds():
        kind_register(kind)
