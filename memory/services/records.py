"""Storing, editing and deleting memories, with their text-search vectors and embeddings."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.postgres.search import SearchVector
from django.db import models, transaction
from django.db.models import F, TextField
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone

from accounts.models import EndUser
from accounts.tenancy import Tenant
from memory.crypto import secret_encrypt
from memory.extractors import Proposal
from memory.models import CoreMemoryBlock, KnowledgeVaultItem
from memory.providers.embeddings import EmbeddingProvider
from memory.types import MEMORY_TYPES, MemoryType, memory_text


class MemoryReadOnlyError(Exception):
    """The memory belongs to another client of the organization: readable, not writable."""


@dataclass(frozen=True)
class Owner:
    """Who new memories belong to (ids, as Celery tasks carry them)."""

    organization_id: str
    client_id: str
    end_user_id: int


def _fingerprint(proposal: Proposal) -> str:
    payload = json.dumps(
        [proposal.memory_type, proposal.fields, sorted(proposal.source_message_ids)],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def search_vector_refresh(kind: MemoryType, ids: list[int]) -> None:
    """Recompute the text-search vector of these rows from their text fields, in SQL."""
    if not ids:
        return
    columns = [
        Coalesce(Cast(F(name), TextField()), models.Value(""), output_field=TextField())
        for name in kind.text_fields
    ]
    kind.model.objects.filter(pk__in=ids).update(
        search_vector=SearchVector(*columns, config=settings.TEXT_SEARCH_CONFIG)
    )


def embeddings_write(
    *, kind: MemoryType, rows: list[models.Model], embedder: EmbeddingProvider | None
) -> None:
    """Embed each row's text (in chunks that fit the model) and store one vector per chunk,
    replacing this model's earlier vectors of those rows."""
    if embedder is None or kind.embedding_model is None or not rows:
        return
    chunks: list[tuple[models.Model, int, str]] = []
    for row in rows:
        text = memory_text(kind, row)
        if text.strip():
            chunks.extend((row, index, chunk) for index, chunk in enumerate(embedder.chunk(text)))
    vectors = embedder.embed([text for _row, _index, text in chunks])
    kind.embedding_model.objects.filter(
        memory__in=[row.pk for row in rows], model=embedder.model_name
    ).delete()
    kind.embedding_model.objects.bulk_create(
        [
            kind.embedding_model(
                organization_id=row.organization_id,
                client_id=row.client_id,
                end_user_id=row.end_user_id,
                memory=row,
                model=embedder.model_name,
                chunk_index=index,
                embedding=vector,
            )
            for (row, index, _text), vector in zip(chunks, vectors, strict=True)
        ]
    )


def _row_for(kind: MemoryType, owner: Owner, proposal: Proposal, fingerprint: str) -> models.Model:
    fields = dict(proposal.fields)
    if kind.model is KnowledgeVaultItem:
        fields["secret_value_encrypted"] = secret_encrypt(fields.pop("secret_value"))
    if kind.name == "episodic":
        fields.setdefault("occurred_at", proposal.occurred_at or timezone.now())
    return kind.model(
        organization_id=owner.organization_id,
        client_id=owner.client_id,
        end_user_id=owner.end_user_id,
        source_message_ids=sorted(proposal.source_message_ids),
        filter_tags=proposal.filter_tags,
        fingerprint=fingerprint,
        **fields,
    )


def _core_apply(owner: Owner, proposals: list[Proposal]) -> int:
    changed = 0
    for proposal in proposals:
        block, _ = CoreMemoryBlock.objects.select_for_update().get_or_create(
            organization_id=owner.organization_id,
            client_id=owner.client_id,
            end_user_id=owner.end_user_id,
            label=proposal.fields["label"],
        )
        value = proposal.fields["value"]
        if proposal.fields.get("mode") == "append" and block.value:
            if value in block.value:
                continue  # already there: a re-run must not append it twice
            value = f"{block.value}\n{value}"
        block.value = value[-block.limit :]
        block.source_message_ids = sorted(
            set(block.source_message_ids) | set(proposal.source_message_ids)
        )
        block.save(update_fields=["value", "source_message_ids", "updated_at"])
        changed += 1
    return changed


@transaction.atomic
def memories_store(
    *,
    owner: Owner,
    proposals: list[Proposal],
    embedder: EmbeddingProvider | None,
    enabled_types: set[str],
) -> dict[str, int]:
    """Store what is new among the proposals (a proposal already stored, same type, fields and
    sources, is skipped: re-running extraction never duplicates). Returns counts per type."""
    by_type: dict[str, list[Proposal]] = defaultdict(list)
    for proposal in proposals:
        if proposal.memory_type in enabled_types:
            by_type[proposal.memory_type].append(proposal)
    counts: dict[str, int] = {}
    if by_type.get("core"):
        counts["core"] = _core_apply(owner, by_type.pop("core"))
    for type_name, typed in by_type.items():
        kind = MEMORY_TYPES[type_name]
        fingerprinted = {_fingerprint(proposal): proposal for proposal in typed}
        existing = set(
            kind.model.objects.filter(
                end_user_id=owner.end_user_id,
                client_id=owner.client_id,
                fingerprint__in=list(fingerprinted),
            ).values_list("fingerprint", flat=True)
        )
        rows = kind.model.objects.bulk_create(
            [
                _row_for(kind, owner, proposal, fingerprint)
                for fingerprint, proposal in fingerprinted.items()
                if fingerprint not in existing
            ]
        )
        search_vector_refresh(kind, [row.pk for row in rows])
        embeddings_write(kind=kind, rows=rows, embedder=embedder)
        counts[type_name] = len(rows)
    return counts


def _writable(tenant: Tenant, row: models.Model) -> None:
    if row.client_id != tenant.client.pk:
        raise MemoryReadOnlyError(row.pk)


@transaction.atomic
def memory_update(
    *,
    tenant: Tenant,
    kind: MemoryType,
    row: models.Model,
    changes: dict[str, Any],
    embedder: EmbeddingProvider | None,
) -> models.Model:
    """Edit a memory the caller's client wrote; its search vector and embeddings follow."""
    _writable(tenant, row)
    return memory_admin_update(kind=kind, row=row, changes=changes, embedder=embedder)


@transaction.atomic
def memory_admin_update(
    *,
    kind: MemoryType,
    row: models.Model,
    changes: dict[str, Any],
    embedder: EmbeddingProvider | None,
) -> models.Model:
    """Edit a memory (an operator may edit any); its search vector and embeddings follow."""
    changes = dict(changes)
    if "secret_value" in changes:
        changes["secret_value_encrypted"] = secret_encrypt(changes.pop("secret_value"))
    for name, value in changes.items():
        setattr(row, name, value)
    row.save(update_fields=[*changes, "updated_at"])
    if kind.embedding_model is not None:
        search_vector_refresh(kind, [row.pk])
        embeddings_write(kind=kind, rows=[row], embedder=embedder)
    return row


@transaction.atomic
def memory_delete(*, tenant: Tenant, row: models.Model) -> None:
    _writable(tenant, row)
    row.delete()


@transaction.atomic
def memories_clear(*, tenant: Tenant, end_user: EndUser) -> dict[str, int]:
    """Delete every memory the caller's client holds about the user (other clients' stay)."""
    counts = {}
    for name, kind in MEMORY_TYPES.items():
        _, per_model = kind.model.objects.filter(
            organization_id=tenant.organization.pk, client_id=tenant.client.pk, end_user=end_user
        ).delete()
        counts[name] = per_model.get(kind.model._meta.label, 0)  # not counting its embeddings
    return counts
