"""Storing, editing and deleting memories; the engine's index writer keeps their postings and
embeddings in step."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import models, transaction
from django.utils import timezone

from accounts.models import EndUser
from accounts.tenancy import Tenant
from memory.crypto import secret_encrypt
from memory.extractors import Proposal
from memory.models import CoreMemoryBlock, KnowledgeVaultItem
from memory.search import memory_kinds
from memory.types import MEMORY_TYPES, MemoryType
from mirix_site.common.errors import ReadOnlyError
from mirix_site.providers.embeddings import EmbeddingProvider
from mirix_site.search.index import (
    documents_index,
    documents_reindex,
    documents_unindex,
    index_clear,
)


class MemoryReadOnlyError(ReadOnlyError):
    """The memory belongs to another client of the organization: readable, not writable."""


@dataclass(frozen=True)
class Owner:
    """Who new memories belong to (ids, as Celery tasks carry them)."""

    organization_id: str
    client_id: str
    end_user_id: int


def _fingerprint(proposal: Proposal) -> str:
    if proposal.client_memory_id is not None:
        payload = json.dumps(["client", proposal.memory_type, proposal.client_memory_id])
    else:
        payload = json.dumps(
            [proposal.memory_type, proposal.fields, sorted(proposal.source_message_ids)],
            sort_keys=True,
            default=str,
        )
    return hashlib.sha256(payload.encode()).hexdigest()


def _row_for(
    memory_type: MemoryType, owner: Owner, proposal: Proposal, fingerprint: str
) -> models.Model:
    fields = dict(proposal.fields)
    if memory_type.model is KnowledgeVaultItem:
        fields["secret_value_encrypted"] = secret_encrypt(fields.pop("secret_value"))
    if memory_type.name == "episodic":
        fields.setdefault("occurred_at", proposal.occurred_at or timezone.now())
    if memory_type.name == "semantic":
        # A fact holds from when it was said (its turn's time), not from when it was stored.
        fields.setdefault("valid_from", proposal.occurred_at or timezone.now())
    return memory_type.model(
        organization_id=owner.organization_id,
        client_id=owner.client_id,
        end_user_id=owner.end_user_id,
        source_message_ids=sorted(proposal.source_message_ids),
        filter_tags=proposal.filter_tags,
        turn_tags=proposal.tags_per_turn(),
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
    written = []
    for type_name, by_key in candidates.items():
        memory_type = MEMORY_TYPES[type_name]
        existing = set(
            memory_type.model.objects.filter(
                end_user_id__in={key[0] for key in by_key},
                fingerprint__in=[key[2] for key in by_key],
            ).values_list("end_user_id", "client_id", "fingerprint")
        )
        new = [(key, value) for key, value in by_key.items() if key not in existing]
        rows = memory_type.model.objects.bulk_create(
            [
                _row_for(memory_type, requests[index].owner, proposal, fingerprint)
                for (_user_id, _client_id, fingerprint), (index, proposal) in new
            ]
        )
        for (_key, (index, _proposal)), row in zip(new, rows, strict=True):
            counts[index][type_name] += 1
            written.append((memory_type.kind, row))
    documents_index(documents=written, embedders=embedders)
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
    if not tenant.owns(row):
        raise MemoryReadOnlyError(row.pk)


@transaction.atomic
def memory_update(
    *,
    tenant: Tenant,
    memory_type: MemoryType,
    row: models.Model,
    changes: dict[str, Any],
    embedders: Sequence[EmbeddingProvider],
) -> models.Model:
    """Edit a memory the caller's client wrote; its index entries and embeddings follow."""
    _writable(tenant, row)
    return memory_admin_update(
        memory_type=memory_type, row=row, changes=changes, embedders=embedders
    )


@transaction.atomic
def memory_admin_update(
    *,
    memory_type: MemoryType,
    row: models.Model,
    changes: dict[str, Any],
    embedders: Sequence[EmbeddingProvider],
) -> models.Model:
    """Edit a memory (an operator may edit any); its index entries and embeddings follow."""
    changes = dict(changes)
    if "secret_value" in changes:
        changes["secret_value_encrypted"] = secret_encrypt(changes.pop("secret_value"))
    for name, value in changes.items():
        setattr(row, name, value)
    row.save(update_fields=[*changes, "updated_at"])
    if memory_type.kind is not None:
        documents_reindex(documents=[(memory_type.kind, row)], embedders=embedders)
    return row


@transaction.atomic
def memory_delete(*, tenant: Tenant, memory_type: MemoryType, row: models.Model) -> None:
    _writable(tenant, row)
    memory_admin_delete(memory_type=memory_type, row=row)


@transaction.atomic
def memory_admin_delete(*, memory_type: MemoryType, row: models.Model) -> None:
    """Delete a memory (an operator may delete any), and take it out of the search index."""
    if memory_type.kind is not None:
        documents_unindex(kind=memory_type.kind, document_ids=[row.pk])
    row.delete()


@transaction.atomic
def memories_clear(*, tenant: Tenant, end_user: EndUser) -> dict[str, int]:
    """Delete every memory the caller's client holds about the user (other clients' stay)."""
    index_clear(kinds=memory_kinds(), end_user=end_user, client=tenant.client)
    counts = {}
    for name, memory_type in MEMORY_TYPES.items():
        _, per_model = memory_type.model.objects.owned_by(tenant, end_user=end_user).delete()
        # Not counting its embeddings, which go with it.
        counts[name] = per_model.get(memory_type.model._meta.label, 0)
    return counts
