"""Auto-dream modes: what ``POST /memory/auto_dream`` can do for a user. Each mode is registered
by the app that does it (``core``, ``episodic``, ``semantic``, ``resource``,
``knowledge_vault``: merging near-duplicates, registered by the memory app; ``experience``
and ``procedural``: registered by skills), as searchable kinds and procedural sources are;
``all`` runs every registered mode. A mode's ``run(tenant, end_user, request)`` answers its
report (for the merging modes ``{total, merged, superseded, unchanged}``) and, with
``dry_run``, changes nothing. ``memory.services.dreams`` runs a request (its run row, its
history context)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from accounts.models import EndUser
from accounts.tenancy import Tenant

# Every registered mode, one after the other, each reported under its name.
ALL = "all"


@dataclass(frozen=True)
class DreamRequest:
    mode: str
    dry_run: bool
    last_n_sessions: int = 20
    meta_agent_id: str | None = None
    model: str | None = None


@dataclass(frozen=True)
class DreamMode:
    name: str
    run: Callable[[Tenant, EndUser, DreamRequest], dict[str, Any]]


_modes: dict[str, DreamMode] = {}


def dream_mode_register(mode: DreamMode) -> None:
    _modes[mode.name] = mode


def dream_modes() -> list[str]:
    """The modes a request may name: each registered one, and ``all``."""
    return [*sorted(_modes), ALL]


def dream_run(*, tenant: Tenant, end_user: EndUser, request: DreamRequest) -> dict[str, Any]:
    """Run the request's mode (``dream_modes()`` names those there are): ``{"types": {mode:
    report}}``, and for one mode its report's keys beside."""
    if request.mode != ALL:
        report = _modes[request.mode].run(tenant, end_user, request)
        return {**report, "types": {request.mode: report}}
    return {
        "types": {
            name: mode.run(tenant, end_user, replace(request, mode=name))
            for name, mode in sorted(_modes.items())
        }
    }
