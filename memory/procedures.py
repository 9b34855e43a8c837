"""Procedural knowledge that higher apps keep (skills learned from task sessions), served with
conversation memory: MIRIX's ``procedural`` type holds extracted procedures *and* what a
registered source finds for the same query.

Apps above this one register a ``ProceduralSource`` in ``AppConfig.ready()``, as they register
their searchable kinds; the conversation and topic retrievals ask each for its items, and
``DELETE /memory/procedural/{id}`` hands an id a source recognises (its own prefix) to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accounts.models import EndUser
from accounts.tenancy import Tenant


@dataclass(frozen=True)
class ProceduralSource:
    """``find(tenant, end_user, query, limit)``: the items for a query, in the procedural
    shape; ``prefix``: how the source's ids begin (``skill-``); ``delete(tenant, end_user,
    item_id)``: delete one of them within the user, False when it is not the user's or not the
    caller's client's own."""

    prefix: str
    find: Callable[[Tenant, EndUser, str, int], list[dict[str, Any]]]
    delete: Callable[[Tenant, EndUser, str], bool]


_sources: dict[str, ProceduralSource] = {}


def procedural_source_register(source: ProceduralSource) -> None:
    _sources[source.prefix] = source


def procedures_find(
    *, tenant: Tenant, end_user: EndUser, query: str, limit: int
) -> list[dict[str, Any]]:
    """Every registered source's items for the query (each at most ``limit``)."""
    if not query.strip():
        return []
    found: list[dict[str, Any]] = []
    for source in _sources.values():
        found += source.find(tenant, end_user, query, limit)
    return found


def procedural_source_of(item_id: str) -> ProceduralSource | None:
    """The source whose ids look like this one, if any."""
    return next((s for prefix, s in _sources.items() if item_id.startswith(prefix)), None)
