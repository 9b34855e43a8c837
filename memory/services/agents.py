"""Writes of the memory app."""

from __future__ import annotations

from django.db import transaction

from accounts.tenancy import Tenant
from memory.agent_config import MetaAgentSettings
from memory.crypto import secret_encrypt
from memory.models import MetaAgent


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
