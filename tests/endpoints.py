"""Every API endpoint, with a request that reaches it, for the tests every endpoint must pass.

``test_every_endpoint_is_listed`` fails when a URL is added without an entry here, so no
endpoint escapes the no-key / bad-key / revoked-key / other-tenant tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Endpoint:
    method: str
    # Path, body and params may name {user_id}, {agent_id}, {session_id}, {memory_id}: filled
    # with objects of the tenant under test (or of another tenant, for the 404 test).
    path: str
    body: dict[str, Any] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    route: str = ""  # the Django URL pattern, to check that every route is covered
    reads_only: bool = False  # a POST that only reads (retrieval with a body)

    @property
    def writes(self) -> bool:
        return not self.reads_only and self.method in {"POST", "PUT", "PATCH", "DELETE"}


ENDPOINTS = [
    Endpoint("POST", "/users/create_or_get", {"user_id": "carol"}, route="users/create_or_get"),
    Endpoint("GET", "/users", route="users"),
    Endpoint("GET", "/users/{user_id}", route="users/<str:user_id>"),
    Endpoint("DELETE", "/users/{user_id}", route="users/<str:user_id>"),
    Endpoint(
        "POST",
        "/agents/meta/initialize",
        {"provider": "openai", "api_key": "sk-test"},
        route="agents/meta/initialize",
    ),
    Endpoint("GET", "/agents", route="agents"),
    Endpoint("GET", "/agents/{agent_id}", route="agents/<str:agent_id>"),
    Endpoint(
        "POST",
        "/memory/add",
        {"user_id": "{user_id}", "messages": [{"role": "user", "content": "hello"}]},
        route="memory/add",
    ),
    Endpoint(
        "GET", "/memory/components", params={"user_id": "{user_id}"}, route="memory/components"
    ),
    Endpoint("POST", "/memory/clear", {"user_id": "{user_id}"}, route="memory/clear"),
    Endpoint(
        "PATCH",
        "/memory/episodic/{memory_id}",
        {"summary": "edited"},
        route="memory/<str:memory_type>/<str:memory_id>",
    ),
    Endpoint(
        "DELETE", "/memory/episodic/{memory_id}", route="memory/<str:memory_type>/<str:memory_id>"
    ),
    Endpoint("DELETE", "/users/{user_id}/memories", route="users/<str:user_id>/memories"),
    Endpoint(
        "GET",
        "/memory/search",
        params={"user_id": "{user_id}", "query": "draft"},
        route="memory/search",
    ),
    Endpoint(
        "GET",
        "/memory/search_all_users",
        params={"query": "draft"},
        route="memory/search_all_users",
    ),
    Endpoint(
        "GET",
        "/memory/retrieve/topic",
        params={"user_id": "{user_id}", "topic": "draft"},
        route="memory/retrieve/topic",
    ),
    Endpoint(
        "POST",
        "/memory/retrieve/conversation",
        {"user_id": "{user_id}", "messages": [{"role": "user", "content": "the draft?"}]},
        route="memory/retrieve/conversation",
        reads_only=True,
    ),
    Endpoint("GET", "/sessions", params={"user_id": "{user_id}"}, route="sessions"),
    Endpoint(
        "GET",
        "/sessions/{session_id}",
        params={"user_id": "{user_id}"},
        route="sessions/<str:session_id>",
    ),
    Endpoint(
        "GET",
        "/sessions/{session_id}/messages",
        params={"user_id": "{user_id}"},
        route="sessions/<str:session_id>/messages",
    ),
    Endpoint(
        "POST",
        "/sessions/{session_id}/close",
        {"user_id": "{user_id}"},
        route="sessions/<str:session_id>/close",
    ),
]

# Routes that are deliberately public or not part of the key-authenticated API.
UNAUTHENTICATED_ROUTES = {"health", "api/schema/", "api/docs/"}
