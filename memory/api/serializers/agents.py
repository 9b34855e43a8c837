"""Request and response shapes of the memory API (MIRIX client 0.1.7 compatible)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memory.agent_config import (
    COMPONENT_AGENT_TYPES,
    PROVIDERS,
    config_schema,
    meta_agent_settings_from_config,
    meta_agent_settings_from_provider,
)
from memory.models import MetaAgent
from mirix_site.api.fields import BooleanField, FloatField, IntegerField, TextChoiceField, TextField

# --- Meta agent initialization ----------------------------------------------------------------


@extend_schema_field(config_schema())
class MetaAgentConfigField(serializers.DictField):
    """A MIRIX ``config`` object, read by ``meta_agent_settings_from_config``."""


class MetaAgentInitializeInputSerializer(serializers.Serializer):
    """``provider`` (quick setup, with ``api_key`` and ``model``), or a ``config``;
    ``provider`` wins when both are given, but a config given is valid. With neither (or an
    empty config) the meta agent is configured as the server runs (``server_llm_config``)."""

    config = MetaAgentConfigField(required=False, allow_null=True)
    provider = TextChoiceField(choices=PROVIDERS, required=False, allow_null=True)
    api_key = TextField(required=False, allow_null=True, allow_blank=True, max_length=500)
    model = TextField(required=False, allow_null=True, allow_blank=True, max_length=200)
    update_agents = BooleanField(required=False, default=True)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        provider, config = attrs.get("provider"), attrs.get("config")
        try:
            from_config = meta_agent_settings_from_config(config or {})
            agent_settings = (
                meta_agent_settings_from_provider(
                    provider=provider, api_key=attrs.get("api_key"), model=attrs.get("model")
                )
                if provider
                else from_config
            )
        except DjangoValidationError as error:
            raise serializers.ValidationError(error.message_dict) from None
        return {"agent_settings": agent_settings, "update": attrs["update_agents"]}


# --- AgentState -------------------------------------------------------------------------------


class LLMConfigSerializer(serializers.Serializer):
    model = TextField()
    model_endpoint_type = TextField()
    model_endpoint = TextField(required=False, allow_null=True, allow_blank=True)
    model_wrapper = TextField(required=False, allow_null=True, allow_blank=True)
    context_window = IntegerField()
    temperature = FloatField(required=False)
    max_tokens = IntegerField(required=False, allow_null=True)
    handle = TextField(required=False, allow_null=True, allow_blank=True)
    enable_reasoner = BooleanField(required=False)
    reasoning_effort = TextField(required=False, allow_null=True, allow_blank=True)
    max_reasoning_tokens = IntegerField(required=False)
    put_inner_thoughts_in_kwargs = BooleanField(required=False, allow_null=True)
    is_local_model = BooleanField(required=False, allow_null=True)
    api_version = TextField(required=False, allow_null=True, allow_blank=True)
    azure_endpoint = TextField(required=False, allow_null=True, allow_blank=True)
    azure_deployment = TextField(required=False, allow_null=True, allow_blank=True)


class EmbeddingConfigSerializer(serializers.Serializer):
    embedding_model = TextField()
    embedding_endpoint_type = TextField()
    embedding_endpoint = TextField(required=False, allow_null=True, allow_blank=True)
    embedding_dim = IntegerField()
    embedding_chunk_size = IntegerField(required=False, allow_null=True)
    handle = TextField(required=False, allow_null=True, allow_blank=True)
    azure_endpoint = TextField(required=False, allow_null=True, allow_blank=True)
    azure_version = TextField(required=False, allow_null=True, allow_blank=True)
    azure_deployment = TextField(required=False, allow_null=True, allow_blank=True)


class BlockSerializer(serializers.Serializer):
    id = TextField()
    label = TextField()
    value = TextField(allow_blank=True)
    limit = IntegerField()
    agent_id = TextField()
    organization_id = TextField()


class AgentMemorySerializer(serializers.Serializer):
    blocks = BlockSerializer(many=True)


@dataclass
class AgentView:
    """One agent as the MIRIX AgentState shows it: the meta agent or a component sub-agent."""

    id: str
    name: str
    agent_type: str
    system: str
    llm_config: dict[str, Any]
    embedding_config: dict[str, Any] | None
    organization_id: str
    created_by_id: str
    parent_id: str | None
    memory: dict[str, Any]
    children: list[AgentView] | None
    created_at: datetime
    updated_at: datetime


def agent_view(meta_agent: MetaAgent, component: str | None = None) -> AgentView:
    """The meta agent (``component=None``, with its components as children) or one component."""
    common = {
        "llm_config": meta_agent.llm_config,
        "embedding_config": meta_agent.embedding_config,
        "organization_id": meta_agent.organization_id,
        "created_by_id": meta_agent.client_id,
        "created_at": meta_agent.created_at,
        "updated_at": meta_agent.updated_at,
    }
    if component is not None:
        agent_type = COMPONENT_AGENT_TYPES[component]
        return AgentView(
            id=meta_agent.component_agent_id(component),
            # MIRIX main's name for a sub-agent (agent_manager.py: the meta agent's name, then
            # the type), which its by-name route and tests read; 0.1.7 reads none.
            name=f"{meta_agent.name}_{agent_type}",
            agent_type=agent_type,
            system=meta_agent.system_prompts.get(agent_type, ""),
            parent_id=meta_agent.pk,
            memory={"blocks": []},
            children=None,
            **common,
        )
    blocks = [
        {
            **block,
            "id": meta_agent.core_block_id(block["label"]),
            "agent_id": meta_agent.pk,
            "organization_id": meta_agent.organization_id,
        }
        for block in meta_agent.core_blocks
    ]
    return AgentView(
        id=meta_agent.pk,
        name=meta_agent.name,
        agent_type="meta_memory_agent",
        system=meta_agent.system or meta_agent.system_prompts.get("meta_memory_agent", ""),
        parent_id=None,
        memory={"blocks": blocks},
        children=[agent_view(meta_agent, name) for name in meta_agent.memory_components],
        **common,
    )


class AgentStateSerializer(serializers.Serializer):
    """The MIRIX ``AgentState``. Provider API keys are never echoed back."""

    id = TextField()
    name = TextField()
    agent_type = TextField()
    system = TextField(allow_blank=True)
    llm_config = LLMConfigSerializer()
    embedding_config = EmbeddingConfigSerializer(allow_null=True)
    organization_id = TextField()
    created_by_id = TextField(help_text="the client that created it (MIRIX's actor)")
    parent_id = TextField(allow_null=True)
    memory = AgentMemorySerializer()
    tools = serializers.SerializerMethodField()
    mcp_tools = serializers.SerializerMethodField()
    children = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_tools(self, agent: AgentView) -> list[dict[str, Any]]:
        return []

    @extend_schema_field(serializers.ListField(child=TextField()))
    def get_mcp_tools(self, agent: AgentView) -> list[str]:
        return []

    @extend_schema_field(serializers.ListField(child=serializers.DictField(), allow_null=True))
    def get_children(self, agent: AgentView) -> list[dict[str, Any]] | None:
        if agent.children is None:
            return None
        return AgentStateSerializer(agent.children, many=True).data


class SystemPromptInputSerializer(serializers.Serializer):
    # Kept as sent, as MIRIX keeps it: a prompt's closing newline is the prompt's.
    system_prompt = TextField(max_length=100_000, trim_whitespace=False)


class AgentListParamsSerializer(serializers.Serializer):
    parent_id = TextField(required=False, allow_blank=True, help_text="list this agent's children")
    limit = IntegerField(required=False, min_value=1, max_value=1000)
    query_text = TextField(required=False, allow_blank=True)
    tags = TextField(required=False, allow_blank=True)
    cursor = TextField(required=False, allow_blank=True)
