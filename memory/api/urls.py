from __future__ import annotations

from django.urls import path

from memory.api import agents, dreams, imports, memories, retrieval

urlpatterns = [
    path(
        "agents/meta/initialize",
        agents.MetaAgentInitializeApi.as_view(),
        name="meta-agent-initialize",
    ),
    path("agents", agents.AgentListApi.as_view(), name="agent-list"),
    path(
        "agents/by-name/<str:agent_name>/system",
        agents.AgentSystemPromptByNameApi.as_view(),
        name="agent-system-by-name",
    ),
    path("agents/<str:agent_id>", agents.AgentDetailApi.as_view(), name="agent-detail"),
    path(
        "agents/<str:agent_id>/system",
        agents.AgentSystemPromptApi.as_view(),
        name="agent-system",
    ),
    path("memory/add", memories.MemoryAddApi.as_view(), name="memory-add"),
    path("memory/import", imports.MemoryImportApi.as_view(), name="memory-import"),
    path("memory/components", memories.MemoryComponentsApi.as_view(), name="memory-components"),
    path("memory/clear", memories.MemoryClearApi.as_view(), name="memory-clear"),
    path("memory/auto_dream", dreams.AutoDreamApi.as_view(), name="memory-auto-dream"),
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
        memories.MemoryDetailApi.as_view(),
        name="memory-detail",
    ),
    path(
        "memory/<str:memory_type>/<str:memory_id>/history",
        memories.MemoryHistoryApi.as_view(),
        name="memory-history",
    ),
    path("users/<str:user_id>/memories", memories.UserMemoriesApi.as_view(), name="user-memories"),
]
