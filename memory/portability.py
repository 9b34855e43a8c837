"""The memory types' rows in an end user's export (``accounts.portability``), one kind per type
(``memory.types``): their columns, their provenance (the messages of the file they came from)
and what superseded them. An import stores them redacted, as extraction does, and indexes
and embeds them with the same call extraction makes (``documents_index`` with the write
embedders), so they are found exactly as memories written here are.

A knowledge-vault item travels as it is stored: its value encrypted under the server's
``ENCRYPTION_KEY``, never in clear. An import refuses a value it cannot decrypt: an install
with another key must share it, or the vault items be left out."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models

from accounts.portability import (
    ImportRun,
    PortableKind,
    model_columns,
    portable_kind_register,
    portable_skip,
)
from memory.crypto import secret_decrypt
from memory.models import DreamRun, ExtractionJob, KnowledgeVaultItem
from memory.services.redaction import memory_row_redact, memory_text_fields
from memory.types import MEMORY_TYPES, MemoryType
from mirix_site.search.index import documents_index
from mirix_site.search.spaces import write_embedders

# Memories indexed and embedded per call.
INDEX_BATCH = 200


def _prepare(row: models.Model, record: dict[str, Any], run: ImportRun) -> None:
    """No sensitive value in clear outside the vault's encrypted one, whatever the file says;
    turn tags a tag filter can match (``memory.tags``): a file written before memories kept
    them gives its one tag set."""
    memory_row_redact(row, memory_text_fields(type(row)))
    if hasattr(row, "turn_tags"):
        if "turn_tags" not in record:
            row.turn_tags = [row.filter_tags]
        elif not (
            isinstance(row.turn_tags, list) and all(isinstance(t, dict) for t in row.turn_tags)
        ):
            raise ValidationError({"turn_tags": ["A list of tag objects."]})
    if isinstance(row, KnowledgeVaultItem) and secret_decrypt(row.secret_value_encrypted) is None:
        raise ValidationError(
            {
                "secret_value_encrypted": [
                    "Not a value this server can decrypt: it was written under another "
                    "ENCRYPTION_KEY (or is empty)."
                ]
            }
        )


def _index(memory_type: MemoryType, row_ids: Sequence[int], run: ImportRun) -> None:
    if memory_type.kind is None:
        return  # core blocks are returned whole, never searched
    embedders = write_embedders()
    for start in range(0, len(row_ids), INDEX_BATCH):
        rows = memory_type.model.objects.filter(pk__in=row_ids[start : start + INDEX_BATCH])
        documents_index(
            documents=[(memory_type.kind, row) for row in rows.order_by("pk")],
            embedders=embedders,
        )


def _kind(position: int, memory_type: MemoryType) -> PortableKind:
    model = memory_type.model
    return PortableKind(
        name=memory_type.name,
        position=position,
        model=model,
        fields=model_columns(model, without=["source_message_ids"]),
        later_links={"superseded_by": memory_type.name},
        id_lists={"source_message_ids": "message"},
        prepare=_prepare,
        finish=partial(_index, memory_type),
    )


def memory_portable_register() -> None:
    # After the messages they cite (sessions.portability: 30), before experiences (50).
    for offset, memory_type in enumerate(MEMORY_TYPES.values()):
        portable_kind_register(_kind(40 + offset, memory_type))
    for memory_type in MEMORY_TYPES.values():
        if memory_type.kind is not None:
            portable_skip(
                memory_type.kind.embedding_model, "Vectors: an import embeds the memories again."
            )
    portable_skip(
        ExtractionJob,
        "This install's work on the turns; each message carries how far extraction got.",
    )
    portable_skip(DreamRun, "This install's consolidation work; what it changed travels.")
