"""Reads of the memory app. Every read takes the tenant first."""

from __future__ import annotations

from datetime import datetime

from django.db import models
from django.db.models import QuerySet

from accounts.models import EndUser
from accounts.tenancy import Tenant
from memory.models import ExtractionJob, MetaAgent
from memory.models.records import CURRENT
from memory.types import MemoryType
from mirix_site.common.counts import TableCount, table_count
from mirix_site.common.ids import row_id


def meta_agent_list(*, tenant: Tenant) -> QuerySet[MetaAgent]:
    """The client's own meta agent (a list of at most one, as MIRIX lists agents)."""
    return MetaAgent.objects.filter(organization=tenant.organization, client=tenant.client)


def meta_agent_get(*, tenant: Tenant, agent_id: str) -> tuple[MetaAgent, str | None]:
    """The meta agent with this id, or the one whose component sub-agent has this id (with that
    component's name). Raises ``MetaAgent.DoesNotExist`` for anything the client cannot see."""
    for meta_agent in meta_agent_list(tenant=tenant):
        if meta_agent.pk == agent_id:
            return meta_agent, None
        for component in meta_agent.memory_components:
            if meta_agent.component_agent_id(component) == agent_id:
                return meta_agent, component
    raise MetaAgent.DoesNotExist(agent_id)


def memory_list(
    *,
    tenant: Tenant,
    memory_type: MemoryType,
    end_user: EndUser | None = None,
    include_superseded: bool = False,
) -> QuerySet:
    """Memories of one type the caller may read (of one user, when given): current ones only,
    as searches see them, unless ``include_superseded``."""
    rows = memory_type.model.objects.readable_by(tenant, end_user=end_user)
    if not include_superseded:
        rows = rows.filter(CURRENT)
    return rows.select_related("end_user")


def memory_get(
    *, tenant: Tenant, memory_type: MemoryType, memory_id: str, include_superseded: bool = False
) -> models.Model:
    """One memory of ``memory_list``; raises the model's ``DoesNotExist`` for anything else."""
    pk = row_id(memory_id)
    if pk is None:
        raise memory_type.model.DoesNotExist(memory_id)
    return memory_list(
        tenant=tenant, memory_type=memory_type, include_superseded=include_superseded
    ).get(pk=pk)


def memory_totals(*, tenant: Tenant, end_user: EndUser) -> dict[str, int]:
    """How many current memories of each type the caller may read of the user (MIRIX's
    ``total_count`` of a retrieval's every type)."""
    from memory.types import MEMORY_TYPES

    return {
        name: memory_list(tenant=tenant, memory_type=memory_type, end_user=end_user).count()
        for name, memory_type in MEMORY_TYPES.items()
    }


def episodes_recent(
    *,
    tenant: Tenant,
    end_user: EndUser,
    limit: int,
    filter_tags: dict,
    start: datetime | None = None,
    end: datetime | None = None,
) -> list[models.Model]:
    """The user's latest current episodes (by when they happened), within the filters: what
    MIRIX answers as a retrieval's ``episodic.recent``, whatever the query."""
    from memory.types import MEMORY_TYPES

    episodic = MEMORY_TYPES["episodic"]
    rows = memory_list(tenant=tenant, memory_type=episodic, end_user=end_user)
    if filter_tags:
        rows = rows.filter(episodic.kind.tags_filter(filter_tags))
    if start is not None:
        rows = rows.filter(occurred_at__gte=start)
    if end is not None:
        rows = rows.filter(occurred_at__lte=end)
    return list(rows.order_by("-occurred_at", "-id")[:limit])


def core_blocks_list(
    *, tenant: Tenant, end_user: EndUser | None, filter_tags: dict, limit: int
) -> list[models.Model]:
    """The core blocks the caller may read (of one user, or of every user), within the tags:
    what MIRIX's newer client asks a search to answer beside what it found."""
    from memory.types import MEMORY_TYPES

    rows = memory_list(tenant=tenant, memory_type=MEMORY_TYPES["core"], end_user=end_user)
    if filter_tags:
        rows = rows.filter(filter_tags__contains=filter_tags)
    return list(rows.order_by("end_user_id", "label", "id")[:limit])


def extraction_backlog() -> tuple[int, datetime | None]:
    """Every tenant's extraction jobs waiting for the worker, and when the oldest was queued:
    an operator's figure (the ``status``/``created_at`` index answers both)."""
    waiting = ExtractionJob.objects.filter(status=ExtractionJob.Status.QUEUED)
    oldest = waiting.order_by("created_at").values_list("created_at", flat=True).first()
    return waiting.count(), oldest


def memory_counts() -> dict[str, TableCount]:
    """Every tenant's memories of each type (superseded ones included): an operator's figure,
    estimated on a big table rather than scanned."""
    from memory.types import MEMORY_TYPES

    return {name: table_count(memory_type.model) for name, memory_type in MEMORY_TYPES.items()}
