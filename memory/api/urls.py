from __future__ import annotations

from django.urls import path

from memory.api import retrieval, views

urlpatterns = [
    path(
        "agents/meta/initialize",
        views.MetaAgentInitializeApi.as_view(),
        name="meta-agent-initialize",
    ),
    path("agents", views.AgentListApi.as_view(), name="agent-list"),
    path("agents/<str:agent_id>", views.AgentDetailApi.as_view(), name="agent-detail"),
    path("memory/add", views.MemoryAddApi.as_view(), name="memory-add"),
    path("memory/components", views.MemoryComponentsApi.as_view(), name="memory-components"),
    path("memory/clear", views.MemoryClearApi.as_view(), name="memory-clear"),
    path("memory/search", retrieval.MemorySearchApi.as_view(), name="memory-search"),
    path(
        "memory/search_all_users",
        retrieval.MemorySearchAllUsersApi.as_view(),
        name="memory-search-all-users",
    ),
    path(
        "memory/retrieve/topic", retrieval.RetrieveTopicApi.as_view(), name="memory-retrieve-topic"
    ),
    path(
        "memory/retrieve/conversation",
        retrieval.RetrieveConversationApi.as_view(),
        name="memory-retrieve-conversation",
    ),
    path(
        "memory/<str:memory_type>/<str:memory_id>",
        views.MemoryDetailApi.as_view(),
        name="memory-detail",
    ),
    path("users/<str:user_id>/memories", views.UserMemoriesApi.as_view(), name="user-memories"),
]
