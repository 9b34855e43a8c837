from __future__ import annotations

from django.urls import path

from memory.api import views

urlpatterns = [
    path(
        "agents/meta/initialize",
        views.MetaAgentInitializeApi.as_view(),
        name="meta-agent-initialize",
    ),
    path("agents", views.AgentListApi.as_view(), name="agent-list"),
    path("agents/<str:agent_id>", views.AgentDetailApi.as_view(), name="agent-detail"),
]
