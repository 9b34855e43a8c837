"""The meta agent endpoints (MIRIX ``/agents``): a client's memory configuration."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.api.base import TenantAPIView
from memory.api.serializers.agents import (
    AgentStateSerializer,
    MetaAgentInitializeInputSerializer,
    agent_view,
)
from memory.selectors import meta_agent_get, meta_agent_list
from memory.services import meta_agent_initialize


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
        responses=AgentStateSerializer(many=True),
        summary="The client's meta agent, as a list (the MIRIX client expects a JSON array)",
    )
    def get(self, request: Request) -> Response:
        agents = [agent_view(meta_agent) for meta_agent in meta_agent_list(tenant=self.tenant)]
        return Response(AgentStateSerializer(agents, many=True).data)


class AgentDetailApi(TenantAPIView):
    @extend_schema(
        responses=AgentStateSerializer, summary="The meta agent or one of its component agents"
    )
    def get(self, request: Request, agent_id: str) -> Response:
        meta_agent, component = meta_agent_get(tenant=self.tenant, agent_id=agent_id)
        return Response(AgentStateSerializer(agent_view(meta_agent, component)).data)
