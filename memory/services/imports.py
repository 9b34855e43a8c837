"""Bulk import of conversation turns (``POST /memory/import``, ``manage.py import_user`` on a
file of turns): lines read one at a time, stored in batches through ``/memory/add``'s own write
(``memory_add``: the same sessions, positions, images and extraction), each batch one
transaction, the import's row (``MemoryImport``) updated as each commits.

Idempotent and resumable by the turns' own ids: every turn of an import carries its
``client_message_id``, so a line sent again (a retried request, the file sent again after a
cut, two imports of one file at once) is found stored and not stored twice. A line that cannot
be stored is refused with its number and reason; the other lines are imported.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from accounts.tenancy import Tenant
from memory.models import MemoryImport
from memory.services.ingest import memory_add
from mirix_site.common.errors import DomainError
from sessions.content import MessageInput

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
class ImportRefusal:
    line: int
    errors: dict[str, list[str]]

    def as_dict(self) -> dict[str, Any]:
        return {"line": self.line, "errors": self.errors}


@dataclass
class ImportPart:
    """What one request (or one run of the command) did."""

    job: MemoryImport
    lines_read: int = 0
    turns_stored: int = 0
    turns_found: int = 0
    refused: list[ImportRefusal] = field(default_factory=list)


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
    *, tenant: Tenant, job: MemoryImport, lines: Iterable[ImportTurn | ImportRefusal]
) -> ImportPart:
    """Store the turns of ``lines``, consecutive ones of one session together, and record the
    refused lines; the import's row is updated after every batch and left idle at the end,
    however the reading ends."""
    part = ImportPart(job=job)
    pending: list[ImportTurn] = []
    try:
        for line in lines:
            part.lines_read += 1
            if isinstance(line, ImportRefusal):
                _progress(part, refused=[line])
                continue
            if pending and (
                pending[-1].batch_key != line.batch_key or len(pending) >= IMPORT_BATCH
            ):
                _batch_store(tenant, part, pending)
                pending = []
            pending.append(line)
        if pending:
            _batch_store(tenant, part, pending)
    finally:
        MemoryImport.objects.filter(pk=job.pk).update(
            state=MemoryImport.State.IDLE, updated_at=timezone.now()
        )
        job.refresh_from_db()
    return part


def _batch_store(tenant: Tenant, part: ImportPart, batch: list[ImportTurn]) -> None:
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
        # The session refuses them all (closed, of the other tag, an image it cannot show).
        reason = {"session_id": [str(exc)]}
        _progress(part, refused=[ImportRefusal(line=turn.line, errors=reason) for turn in batch])
        return
    _progress(part, stored=result.stored, found=len(batch) - result.stored)


@transaction.atomic
def _progress(
    part: ImportPart, *, stored: int = 0, found: int = 0, refused: Sequence[ImportRefusal] = ()
) -> None:
    part.turns_stored += stored
    part.turns_found += found
    part.refused.extend(refused)
    job = MemoryImport.objects.select_for_update().get(pk=part.job.pk)
    job.lines_read += stored + found + len(refused)
    job.turns_stored += stored
    job.turns_found += found
    job.lines_refused += len(refused)
    room = REFUSALS_KEPT - len(job.refusals)
    if room > 0 and refused:
        job.refusals = [
            *job.refusals,
            *({"request": job.requests, **refusal.as_dict()} for refusal in refused[:room]),
        ]
    job.save(
        update_fields=[
            "lines_read",
            "turns_stored",
            "turns_found",
            "lines_refused",
            "refusals",
            "updated_at",
        ]
    )
