"""Storing, editing and deleting memories, with their text-search vectors and embeddings."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Sequence
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
from memory.models import (
    CoreMemoryBlock,
    DocumentStats,
    KnowledgeVaultItem,
    MemoryPosting,
    TermStats,
)
from memory.providers.embeddings import EmbeddingProvider
from memory.retrieval.index import postings_add, postings_remove
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
    *, rows: list[tuple[MemoryType, models.Model]], embedders: Sequence[EmbeddingProvider]
) -> None:
    """Embed each row's text with each model (in chunks that fit it) and store one vector per
    chunk, replacing that model's earlier vectors of those rows."""
    for embedder in embedders:
        _embeddings_write_one(rows, embedder)


def _embeddings_write_one(
    rows: list[tuple[MemoryType, models.Model]], embedder: EmbeddingProvider
) -> None:
    # All rows, of any types, go through one embedding call: the model's fixed cost per call
    # dwarfs a few short texts.
    if not rows:
        return
    chunks: list[tuple[MemoryType, models.Model, int, str]] = []
    for kind, row in rows:
        if kind.embedding_model is None:
            continue
        text = memory_text(kind, row)
        if text.strip():
            chunks.extend(
                (kind, row, index, chunk) for index, chunk in enumerate(embedder.chunk(text))
            )
    vectors = embedder.embed([text for _kind, _row, _index, text in chunks])
    by_kind: dict[str, list[models.Model]] = defaultdict(list)
    for (kind, row, index, _text), vector in zip(chunks, vectors, strict=True):
        by_kind[kind.name].append(
            kind.embedding_model(
                organization_id=row.organization_id,
                client_id=row.client_id,
                end_user_id=row.end_user_id,
                memory=row,
                model=embedder.model_name,
                chunk_index=index,
                embedding=vector,
            )
        )
    for type_name, embeddings in by_kind.items():
        kind = MEMORY_TYPES[type_name]
        kind.embedding_model.objects.filter(
            memory__in=[embedding.memory_id for embedding in embeddings], model=embedder.model_name
        ).delete()
        kind.embedding_model.objects.bulk_create(embeddings)


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


@dataclass
class StoreRequest:
    """One owner's proposals (one extraction job's) and the memory types its client enabled."""

    owner: Owner
    proposals: list[Proposal]
    enabled_types: set[str]


@transaction.atomic
def memories_store_many(
    *, requests: list[StoreRequest], embedders: Sequence[EmbeddingProvider]
) -> list[dict[str, int]]:
    """Store what is new among each request's proposals (one already stored, same owner, type,
    fields and sources, is skipped: re-running extraction never duplicates). Several owners'
    memories are written together, one insert per type and one embedding call in all.
    Returns counts per type for each request, in order."""
    counts: list[dict[str, int]] = [defaultdict(int) for _ in requests]
    candidates: dict[str, dict[tuple[int, str, str], tuple[int, Proposal]]] = defaultdict(dict)
    for index, request in enumerate(requests):
        core = [p for p in request.proposals if p.memory_type == "core"]
        if core and "core" in request.enabled_types:
            counts[index]["core"] = _core_apply(request.owner, core)
        for proposal in request.proposals:
            if proposal.memory_type != "core" and proposal.memory_type in request.enabled_types:
                owner = request.owner
                key = (owner.end_user_id, owner.client_id, _fingerprint(proposal))
                candidates[proposal.memory_type][key] = (index, proposal)
    written: list[tuple[MemoryType, models.Model]] = []
    for type_name, by_key in candidates.items():
        kind = MEMORY_TYPES[type_name]
        existing = set(
            kind.model.objects.filter(
                end_user_id__in={key[0] for key in by_key},
                fingerprint__in=[key[2] for key in by_key],
            ).values_list("end_user_id", "client_id", "fingerprint")
        )
        new = [(key, value) for key, value in by_key.items() if key not in existing]
        rows = kind.model.objects.bulk_create(
            [
                _row_for(kind, requests[index].owner, proposal, fingerprint)
                for (_user_id, _client_id, fingerprint), (index, proposal) in new
            ]
        )
        for (_key, (index, _proposal)), row in zip(new, rows, strict=True):
            counts[index][type_name] += 1
            written.append((kind, row))
        search_vector_refresh(kind, [row.pk for row in rows])
    postings_add(written)
    embeddings_write(rows=written, embedders=embedders)
    return [dict(entry) for entry in counts]


def memories_store(
    *,
    owner: Owner,
    proposals: list[Proposal],
    embedders: Sequence[EmbeddingProvider],
    enabled_types: set[str],
) -> dict[str, int]:
    """``memories_store_many`` for one owner."""
    [counts] = memories_store_many(
        requests=[StoreRequest(owner, proposals, enabled_types)], embedders=embedders
    )
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
    embedders: Sequence[EmbeddingProvider],
) -> models.Model:
    """Edit a memory the caller's client wrote; its search vector and embeddings follow."""
    _writable(tenant, row)
    return memory_admin_update(kind=kind, row=row, changes=changes, embedders=embedders)


@transaction.atomic
def memory_admin_update(
    *,
    kind: MemoryType,
    row: models.Model,
    changes: dict[str, Any],
    embedders: Sequence[EmbeddingProvider],
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
        postings_remove(kind, [row.pk])
        postings_add([(kind, row)])
        embeddings_write(rows=[(kind, row)], embedders=embedders)
    return row


@transaction.atomic
def memory_delete(*, tenant: Tenant, kind: MemoryType, row: models.Model) -> None:
    _writable(tenant, row)
    memory_admin_delete(kind=kind, row=row)


@transaction.atomic
def memory_admin_delete(*, kind: MemoryType, row: models.Model) -> None:
    """Delete a memory (an operator may delete any), and take it out of the search index."""
    postings_remove(kind, [row.pk])
    row.delete()


@transaction.atomic
def memories_clear(*, tenant: Tenant, end_user: EndUser) -> dict[str, int]:
    """Delete every memory the caller's client holds about the user (other clients' stay)."""
    owned = {"end_user": end_user, "client_id": tenant.client.pk}
    # Every indexed memory of this (user, client) goes, so its index rows go whole.
    MemoryPosting.objects.filter(**owned).delete()
    TermStats.objects.filter(**owned).delete()
    DocumentStats.objects.filter(**owned).delete()
    counts = {}
    for name, kind in MEMORY_TYPES.items():
        _, per_model = kind.model.objects.filter(
            organization_id=tenant.organization.pk, client_id=tenant.client.pk, end_user=end_user
        ).delete()
        counts[name] = per_model.get(kind.model._meta.label, 0)  # not counting its embeddings
    return counts
