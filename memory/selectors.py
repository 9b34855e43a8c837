"""Reads of the memory app. Every read takes the tenant first."""

from __future__ import annotations

from django.db.models import QuerySet

from accounts.tenancy import Tenant
from memory.models import MetaAgent


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
