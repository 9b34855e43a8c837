"""Auto-dream modes: what ``POST /memory/auto_dream`` can do for a user. Each mode is registered
by the app that does it (``procedural``: skill learning over the last closed task sessions,
registered by skills), as searchable kinds and procedural sources are; the endpoint validates
the request and hands it to the mode's ``run(tenant, end_user, request)``, which answers the
response's body and, with ``dry_run``, changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accounts.models import EndUser
from accounts.tenancy import Tenant


@dataclass(frozen=True)
class DreamRequest:
    mode: str
    dry_run: bool
    last_n_sessions: int
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
    return sorted(_modes)


def dream_run(*, tenant: Tenant, end_user: EndUser, request: DreamRequest) -> dict[str, Any]:
    """Run the request's mode (``dream_modes()`` names those there are)."""
    return _modes[request.mode].run(tenant, end_user, request)
