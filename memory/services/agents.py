"""Writes of the memory app."""

from __future__ import annotations

from django.db import transaction

from accounts.tenancy import Tenant
from memory.agent_config import COMPONENT_AGENT_TYPES, MetaAgentSettings
from memory.crypto import secret_encrypt
from memory.models import AgentPromptVersion, MetaAgent
from mirix_site.common.errors import NotFoundError


@transaction.atomic
def meta_agent_initialize(
    *, tenant: Tenant, agent_settings: MetaAgentSettings, update: bool
) -> tuple[MetaAgent, bool]:
    """The client's meta agent, created from ``agent_settings`` if it has none; an existing one
    is overwritten only when ``update`` is true (MIRIX's ``update_agents``)."""
    meta_agent = MetaAgent.objects.select_for_update().filter(client=tenant.client).first()
    created = meta_agent is None
    if meta_agent is None:
        meta_agent = MetaAgent(organization=tenant.organization, client=tenant.client)
    elif not update:
        return meta_agent, False
    meta_agent.llm_config = agent_settings.llm_config
    meta_agent.embedding_config = agent_settings.embedding_config
    meta_agent.llm_api_key_encrypted = secret_encrypt(agent_settings.llm_api_key or "")
    meta_agent.embedding_api_key_encrypted = secret_encrypt(agent_settings.embedding_api_key or "")
    meta_agent.memory_components = agent_settings.memory_components
    meta_agent.core_blocks = agent_settings.core_blocks
    meta_agent.system_prompts = agent_settings.system_prompts
    meta_agent.save()
    return meta_agent, created


class AgentNotFoundError(NotFoundError):
    """No agent of the client's meta agent has this name: the message names it and the
    agents there are (the caller's own: shown)."""

    shown = True


# The names an agent goes by: its type, MIRIX's full name (the meta agent's name, then the
# type) and MIRIX's short name (the component's), as the MIRIX client's update_system_prompt
# documents them.
_SHORT_NAMES = {"knowledge": "knowledge_vault"}


def agent_component_resolve(meta_agent: MetaAgent, name: str) -> str | None:
    """The component the name stands for (None: the meta agent itself). Raises
    ``AgentNotFoundError`` for a name no agent of this meta agent has."""
    if name in (meta_agent.name, "meta_memory_agent"):
        return None
    bare = name.removeprefix(f"{meta_agent.name}_").removeprefix("meta_memory_agent_")
    for component in meta_agent.memory_components:
        agent_type = COMPONENT_AGENT_TYPES[component]
        if bare in (agent_type, component) or _SHORT_NAMES.get(bare) == component:
            return component
    available = [
        meta_agent.name,
        *(f"{meta_agent.name}_{COMPONENT_AGENT_TYPES[c]}" for c in meta_agent.memory_components),
    ]
    raise AgentNotFoundError(
        f"Agent with name '{name}' not found for client {meta_agent.client_id}. "
        f"Available agents: {', '.join(available)}."
    )


@transaction.atomic
def agent_system_prompt_set(
    *, meta_agent: MetaAgent, component: str | None, system_prompt: str
) -> MetaAgent:
    """Give one agent of the meta agent (``component``; None: the meta agent) a new system
    prompt, as its next version (``AgentPromptVersion``)."""
    meta_agent = MetaAgent.objects.select_for_update().get(pk=meta_agent.pk)
    agent_type = "meta_memory_agent" if component is None else COMPONENT_AGENT_TYPES[component]
    last = meta_agent.prompts.filter(agent_type=agent_type).order_by("-number").first()
    AgentPromptVersion.objects.create(
        meta_agent=meta_agent,
        organization_id=meta_agent.organization_id,
        agent_type=agent_type,
        number=last.number + 1 if last is not None else 1,
        system=system_prompt,
    )
    if component is None:
        meta_agent.system = system_prompt
    else:
        meta_agent.system_prompts = {**meta_agent.system_prompts, agent_type: system_prompt}
    meta_agent.save(update_fields=["system", "system_prompts", "updated_at"])
    return meta_agent
