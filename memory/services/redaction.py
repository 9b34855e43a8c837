"""Redacting memories stored before the detector knew a form (``sessions.sensitive``): every
memory's text as extraction would store it today. A changed row is indexed again for BM25 and
loses its vectors, which ``manage.py reembed`` (or the next write) gives it again from the
redacted text; the vault's encrypted values are what the vault is for, and stay."""

from __future__ import annotations

from collections.abc import Iterator

from django.db import models, transaction

from memory.types import MEMORY_TYPES, MemoryType
from mirix_site.search.index import documents_reindex
from sessions.sensitive import sensitive_redacted


def memory_text_fields(model: type[models.Model]) -> list[models.Field]:
    """A memory model's text columns, which hold no sensitive value in clear."""
    return [
        field
        for field in model._meta.concrete_fields
        if isinstance(field, models.CharField | models.TextField)
        and field.editable
        and not field.choices
        and not field.is_relation
    ]


def _rows(model: type[models.Model], batch: int) -> Iterator[list[models.Model]]:
    last = 0
    while rows := list(model.objects.filter(pk__gt=last).order_by("pk")[:batch]):
        yield rows
        last = rows[-1].pk


def memory_row_redact(row: models.Model, fields: list[models.Field]) -> list[str]:
    """Redact the row's ``fields`` in place, as extraction stores them; returns the names of
    those it changed."""
    changed = []
    for field in fields:
        value = getattr(row, field.attname)
        if not value:
            continue
        redacted = sensitive_redacted(value)
        if field.max_length:
            redacted = redacted[: field.max_length]
        if redacted != value:
            setattr(row, field.attname, redacted)
            changed.append(field.attname)
    return changed


@transaction.atomic
def _batch_redact(memory_type: MemoryType, rows: list[models.Model], *, dry_run: bool) -> int:
    fields = memory_text_fields(memory_type.model)
    changed = []
    for row in rows:
        names = memory_row_redact(row, fields)
        if names and not dry_run:
            row.save(update_fields=names)
        if names:
            changed.append(row)
    if changed and not dry_run and memory_type.kind is not None:
        kind = memory_type.kind
        documents_reindex(documents=[(kind, row) for row in changed], embedders=[])
        kind.embedding_model.objects.filter(
            **{f"{kind.embedding_attname}__in": [row.pk for row in changed]}
        ).delete()
    return len(changed)


def memories_redact_stored(*, dry_run: bool, batch: int = 500) -> dict[str, int]:
    """Redact every stored memory's text (the vault's values excepted); returns how many rows
    of each memory type held a sensitive value (and were changed, unless ``dry_run``)."""
    counts = {}
    for name, memory_type in MEMORY_TYPES.items():
        counts[name] = sum(
            _batch_redact(memory_type, rows, dry_run=dry_run)
            for rows in _rows(memory_type.model, batch)
        )
    return counts
