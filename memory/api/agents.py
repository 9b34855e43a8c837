"""The meta agent endpoints (MIRIX ``/agents``): a client's memory configuration."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from memory.api.serializers.agents import (
    AgentListParamsSerializer,
    AgentStateSerializer,
    MetaAgentInitializeInputSerializer,
    SystemPromptInputSerializer,
    agent_view,
)
from memory.models import MetaAgent
from memory.selectors import meta_agent_get, meta_agent_list
from memory.services import meta_agent_initialize
from memory.services.agents import (
    agent_component_resolve,
    agent_system_prompt_set,
)
from mirix_site.api.base import TenantAPIView
from mirix_site.api.errors import NamedNotFound


class MetaAgentInitializeApi(TenantAPIView):
    @extend_schema(
        request=MetaAgentInitializeInputSerializer,
        responses={200: AgentStateSerializer, 201: AgentStateSerializer},
        summary="Create or update the client's meta agent (LLM, embedding, memory components)",
    )
    def post(self, request: Request) -> Response:
        serializer = MetaAgentInitializeInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        meta_agent, created = meta_agent_initialize(tenant=self.tenant, **serializer.validated_data)
        return Response(
            AgentStateSerializer(agent_view(meta_agent)).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class AgentListApi(TenantAPIView):
    # A bare JSON array, unpaginated: the MIRIX client reads ``[AgentState(**agent) for agent
    # in data]``, and a client has one meta agent.
    pagination_class = None

    @extend_schema(
        parameters=[AgentListParamsSerializer],
        responses=AgentStateSerializer(many=True),
        summary="The client's meta agent, as a list (the MIRIX client expects a JSON array); "
        "with parent_id, that agent's children",
    )
    def get(self, request: Request) -> Response:
        params = AgentListParamsSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        parent_id = params.validated_data.get("parent_id")
        agents = [agent_view(meta_agent) for meta_agent in meta_agent_list(tenant=self.tenant)]
        if parent_id:
            # MIRIX's list_agents(parent_id=…): the children of that agent (none for a
            # component agent, or for an agent of another client: as a missing one).
            agents = [
                child for agent in agents if agent.id == parent_id for child in agent.children
            ]
        return Response(AgentStateSerializer(agents, many=True).data)


class AgentDetailApi(TenantAPIView):
    @extend_schema(
        responses=AgentStateSerializer, summary="The meta agent or one of its component agents"
    )
    def get(self, request: Request, agent_id: str) -> Response:
        meta_agent, component = meta_agent_get(tenant=self.tenant, agent_id=agent_id)
        return Response(AgentStateSerializer(agent_view(meta_agent, component)).data)


def _prompt_set(meta_agent: MetaAgent, component: str | None, request: Request) -> Response:
    body = SystemPromptInputSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    meta_agent = agent_system_prompt_set(
        meta_agent=meta_agent,
        component=component,
        system_prompt=body.validated_data["system_prompt"],
    )
    return Response(AgentStateSerializer(agent_view(meta_agent, component)).data)


class AgentSystemPromptApi(TenantAPIView):
    @extend_schema(
        request=SystemPromptInputSerializer,
        responses=AgentStateSerializer,
        summary="Give the meta agent or one of its component agents a new system prompt",
        description="Kept and shown, each change a new version; the server's extractor reads "
        "it only with an LLM configured (LLM_PROVIDER).",
    )
    def patch(self, request: Request, agent_id: str) -> Response:
        meta_agent, component = meta_agent_get(tenant=self.tenant, agent_id=agent_id)
        return _prompt_set(meta_agent, component, request)


class AgentSystemPromptByNameApi(TenantAPIView):
    @extend_schema(
        request=SystemPromptInputSerializer,
        responses=AgentStateSerializer,
        summary="Give an agent, named as the MIRIX client names it, a new system prompt",
        description="The name: meta_memory_agent, a component agent's type (episodic_memory_"
        "agent), MIRIX's full name (meta_memory_agent_episodic_memory_agent) or its short name "
        "(episodic, knowledge). An unknown name is 404 naming it and the agents there are. Kept "
        "and shown, each change a new version; the server's extractor reads it only with an "
        "LLM configured (LLM_PROVIDER).",
    )
    def patch(self, request: Request, agent_name: str) -> Response:
        meta_agent = meta_agent_list(tenant=self.tenant).first()
        if meta_agent is None:
            raise NamedNotFound(
                f"Agent with name '{agent_name}' not found: this client has no meta agent "
                "(POST /agents/meta/initialize)."
            )
        component = agent_component_resolve(meta_agent, agent_name)
        return _prompt_set(meta_agent, component, request)
