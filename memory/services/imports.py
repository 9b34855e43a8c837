"""Bulk import (``POST /memory/import``, ``manage.py import_turns``): lines read one at a
time, each a conversation turn or a ready memory. Turns are stored in batches through
``/memory/add``'s own write (``memory_add``: the same sessions, positions, images and
extraction); memories through extraction's (``memories_store``: redacted, indexed and embedded
as extracted ones, so a search finds them once the batch commits). Each batch is one
transaction, and the import's row (``MemoryImport``) is updated as each commits.

Idempotent and resumable: every turn carries its ``client_message_id`` and a memory its
``client_memory_id`` (or, without one, its type, fields and sources make it the same memory),
so a line sent again (a retried request, the file sent again after a cut, two imports of one
file at once) is found stored, not stored twice. A line that cannot be stored is refused with
its number and reason; the other lines are imported.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from accounts.services import end_user_create_or_get
from accounts.tenancy import Tenant
from memory.extractors import Proposal, proposal_redacted
from memory.models import MemoryImport
from memory.models.records import FINGERPRINT_UNIQUE
from memory.services.ingest import memory_add
from memory.services.records import Owner, memories_store
from memory.types import MEMORY_TYPES
from mirix_site.common.database import atomic_run_again
from mirix_site.common.errors import DomainError
from mirix_site.search.spaces import write_embedders
from sessions.content import MessageInput
from sessions.services import MessageImageMissingError

# Consecutive turns of one session stored in one transaction.
IMPORT_BATCH = 200
# Refused lines an import's row keeps (every one is counted; a request's answer lists its own).
REFUSALS_KEPT = 1000


@dataclass(frozen=True)
class ImportTurn:
    """One line's turn, checked: its line, whose it is, its session, and the turn itself."""

    line: int
    user_id: str
    session_id: str | None
    session_tag: str | None
    filter_tags: dict[str, Any]
    message: MessageInput

    @property
    def batch_key(self) -> tuple[Any, ...]:
        """Turns that may go in one call of ``memory_add``: one user, session and tag set."""
        return (
            self.user_id,
            self.session_id,
            self.session_tag,
            json.dumps(self.filter_tags, sort_keys=True),
        )


@dataclass(frozen=True)
class ImportMemory:
    """One line's memory, checked: its line, whose it is, and what to store."""

    line: int
    user_id: str
    proposal: Proposal

    @property
    def batch_key(self) -> tuple[Any, ...]:
        return ("memory", self.user_id)


@dataclass(frozen=True)
class ImportRefusal:
    line: int
    errors: dict[str, list[str]]

    def as_dict(self) -> dict[str, Any]:
        return {"line": self.line, "errors": self.errors}


@dataclass
class ImportPart:
    """What one request (or one run of the command) did."""

    job: MemoryImport
    turns_stored: int = 0
    turns_found: int = 0
    memories_stored: int = 0
    memories_found: int = 0
    refused: list[ImportRefusal] = field(default_factory=list)

    @property
    def lines_read(self) -> int:
        stored = self.turns_stored + self.memories_stored
        return stored + self.turns_found + self.memories_found + len(self.refused)


def memory_import_start(
    *, tenant: Tenant, import_id: str, expected_lines: int | None
) -> MemoryImport:
    """The client's import of this id, new or continued, marked running."""
    job, _ = MemoryImport.objects.get_or_create(
        client=tenant.client,
        import_id=import_id,
        defaults={"organization": tenant.organization},
    )
    updates: dict[str, Any] = {
        "state": MemoryImport.State.RUNNING,
        "requests": F("requests") + 1,
        "updated_at": timezone.now(),
    }
    if expected_lines is not None:
        updates["expected_lines"] = expected_lines
    MemoryImport.objects.filter(pk=job.pk).update(**updates)
    job.refresh_from_db()
    return job


def memory_import_lines(
    *,
    tenant: Tenant,
    job: MemoryImport,
    lines: Iterable[ImportTurn | ImportMemory | ImportRefusal],
) -> ImportPart:
    """Store the turns and memories of ``lines``, consecutive ones of one session (or one
    user's memories) together, and record the refused lines; the import's row is updated after
    every batch and left idle at the end, however the reading ends."""
    part = ImportPart(job=job)
    pending: list[ImportTurn | ImportMemory] = []
    refused: list[ImportRefusal] = []
    try:
        for line in lines:
            if isinstance(line, ImportRefusal):
                refused.append(line)
                if len(refused) >= IMPORT_BATCH:
                    _progress(part, refused=refused)
                    refused = []
                continue
            if pending and (
                pending[-1].batch_key != line.batch_key or len(pending) >= IMPORT_BATCH
            ):
                _batch_store(tenant, part, pending, refused)
                pending, refused = [], []
            pending.append(line)
        if pending or refused:
            _batch_store(tenant, part, pending, refused)
    finally:
        MemoryImport.objects.filter(pk=job.pk).update(
            state=MemoryImport.State.IDLE, updated_at=timezone.now()
        )
        job.refresh_from_db()
    return part


def _batch_store(
    tenant: Tenant, part: ImportPart, batch: list[Any], refused: list[ImportRefusal]
) -> None:
    """Store one batch (all turns of one session, or all memories of one user) and record it
    with the lines refused since the last batch."""
    if not batch:
        _progress(part, refused=refused)
    elif isinstance(batch[0], ImportMemory):
        _memories_store(tenant, part, batch, refused)
    else:
        _turns_store(tenant, part, batch, refused)


def _turns_store(
    tenant: Tenant, part: ImportPart, batch: list[ImportTurn], refused: list[ImportRefusal]
) -> None:
    first = batch[0]
    try:
        result = memory_add(
            tenant=tenant,
            user_id=first.user_id,
            messages=[turn.message for turn in batch],
            session_id=first.session_id,
            session_tag=first.session_tag,
            filter_tags=first.filter_tags,
            occurred_at=None,
            meta_agent_id=None,
        )
    except DomainError as exc:
        # Refused whole: the session is closed or of the other tag, or an image is missing.
        field_name = "content" if isinstance(exc, MessageImageMissingError) else "session_id"
        reason = {field_name: [str(exc)]}
        refused = [*refused, *(ImportRefusal(line=turn.line, errors=reason) for turn in batch)]
        _progress(part, refused=refused)
        return
    _progress(part, stored=result.stored, found=len(batch) - result.stored, refused=refused)


@transaction.atomic
def _progress(
    part: ImportPart,
    *,
    stored: int = 0,
    found: int = 0,
    memories_stored: int = 0,
    memories_found: int = 0,
    refused: Sequence[ImportRefusal] = (),
) -> None:
    refused = sorted(refused, key=lambda refusal: refusal.line)
    part.turns_stored += stored
    part.turns_found += found
    part.memories_stored += memories_stored
    part.memories_found += memories_found
    part.refused.extend(refused)
    job = MemoryImport.objects.select_for_update().get(pk=part.job.pk)
    job.turns_stored += stored
    job.turns_found += found
    job.memories_stored += memories_stored
    job.memories_found += memories_found
    job.lines_refused += len(refused)
    room = REFUSALS_KEPT - len(job.refusals)
    if room > 0 and refused:
        job.refusals = [
            *job.refusals,
            *({"request": job.requests, **refusal.as_dict()} for refusal in refused[:room]),
        ]
    job.save(
        update_fields=[
            "turns_stored",
            "turns_found",
            "memories_stored",
            "memories_found",
            "lines_refused",
            "refusals",
            "updated_at",
        ]
    )


def _memories_store(
    tenant: Tenant, part: ImportPart, batch: list[ImportMemory], refused: list[ImportRefusal]
) -> None:
    stored = _memories_write(tenant, batch)
    _progress(part, memories_stored=stored, memories_found=len(batch) - stored, refused=refused)


# One of the batch's memories stored by a concurrent import first: run again, and find it.
@atomic_run_again(lambda constraint: constraint.endswith(FINGERPRINT_UNIQUE))
def _memories_write(tenant: Tenant, batch: list[ImportMemory]) -> int:
    """Store the batch's memories in one transaction; returns how many were new."""
    end_user, _ = end_user_create_or_get(tenant=tenant, user_id=batch[0].user_id, name=None)
    owner = Owner(
        organization_id=tenant.organization.pk,
        client_id=tenant.client.pk,
        end_user_id=end_user.pk,
    )
    counts = memories_store(
        owner=owner,
        proposals=[proposal_redacted(memory.proposal) for memory in batch],
        embedders=write_embedders(),
        enabled_types=set(MEMORY_TYPES),
    )
    return sum(counts.values())
