"""Reads of the memory app. Every read takes the tenant first."""

from __future__ import annotations

from django.db import models
from django.db.models import QuerySet

from accounts.models import EndUser
from accounts.tenancy import Tenant
from memory.models import ExtractionJob, MetaAgent
from memory.types import MemoryType


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


def memory_list(*, tenant: Tenant, kind: MemoryType, end_user: EndUser | None = None) -> QuerySet:
    """Memories of one type the caller may read: written by its client or by clients in its
    read scopes, in its organization; current ones only (not superseded)."""
    rows = kind.model.objects.filter(
        organization_id=tenant.organization.pk,
        client_id__in=tenant.readable_client_ids,
        superseded_by__isnull=True,
    ).select_related("end_user")
    if end_user is not None:
        rows = rows.filter(end_user=end_user)
    return rows


def memory_get(*, tenant: Tenant, kind: MemoryType, memory_id: str) -> models.Model:
    """One readable memory; raises the model's ``DoesNotExist`` for anything else."""
    if not memory_id.isdigit():
        raise kind.model.DoesNotExist(memory_id)
    return kind.model.objects.select_related("end_user").get(
        pk=int(memory_id),
        organization_id=tenant.organization.pk,
        client_id__in=tenant.readable_client_ids,
    )


def extraction_job_list(
    *, tenant: Tenant, end_user: EndUser | None = None
) -> QuerySet[ExtractionJob]:
    jobs = ExtractionJob.objects.filter(
        organization_id=tenant.organization.pk, client_id=tenant.client.pk
    )
    return jobs.filter(end_user=end_user) if end_user is not None else jobs
