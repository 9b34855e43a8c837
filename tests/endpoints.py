"""Every API endpoint, with a request that reaches it, for the tests every endpoint must pass.

``test_every_endpoint_is_listed`` fails when a URL is added without an entry here, so no
endpoint escapes the no-key / bad-key / revoked-key / other-tenant tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from accounts.services import end_user_create_or_get
from images.services import image_fetch_request
from memory.agent_config import meta_agent_settings_from_provider
from memory.models import EpisodicMemory
from memory.services import meta_agent_initialize
from skills.models import Recommendation
from tests.factories import (
    TenantFixture,
    chat_turns,
    data_url,
    experiences_create,
    image_create,
    learning_run_create,
    memories_create,
    png_bytes,
    skill_create,
)


@dataclass(frozen=True)
class Endpoint:
    method: str
    # Path, body and params may name {user_id}, {agent_id}, {session_id}, {memory_id},
    # {experience_id}, {recommendation_id}, {image_id}, {fetch_id}, {run_id}, {skill_id}: filled
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
    # MCP over streamable HTTP: a JSON-RPC message for the user the URL names; its tools call
    # the endpoints below, each with its own checks.
    Endpoint(
        "POST",
        "/mcp?user_id=owned-user",  # a user id names no object: any is the caller's own
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        route="mcp",
        reads_only=True,
    ),
    Endpoint("POST", "/users/create_or_get", {"user_id": "carol"}, route="users/create_or_get"),
    Endpoint("GET", "/users", route="users"),
    Endpoint("GET", "/users/{user_id}", route="users/<str:user_id>"),
    Endpoint("DELETE", "/users/{user_id}", route="users/<str:user_id>"),
    Endpoint("GET", "/users/{user_id}/export", route="users/<str:user_id>/export"),
    Endpoint(
        "POST",
        "/agents/meta/initialize",
        {"provider": "openai", "api_key": "sk-test"},
        route="agents/meta/initialize",
    ),
    Endpoint("GET", "/agents", route="agents"),
    Endpoint("GET", "/agents/{agent_id}", route="agents/<str:agent_id>"),
    Endpoint(
        "PATCH",
        "/agents/{agent_id}/system",
        {"system_prompt": "Note only what the user states."},
        route="agents/<str:agent_id>/system",
    ),
    Endpoint(
        "PATCH",
        "/agents/by-name/episodic_memory_agent/system",
        {"system_prompt": "Note only what the user states."},
        route="agents/by-name/<str:agent_name>/system",
    ),
    Endpoint(
        "POST",
        "/memory/add",
        {"user_id": "{user_id}", "messages": [{"role": "user", "content": "hello"}]},
        route="memory/add",
    ),
    Endpoint(
        "POST",
        "/memory/import",
        {
            "lines": [
                {
                    "user_id": "{user_id}",
                    "role": "user",
                    "content": "hello",
                    "client_message_id": "import-1",
                }
            ]
        },
        route="memory/import",
    ),
    Endpoint(
        "GET", "/memory/components", params={"user_id": "{user_id}"}, route="memory/components"
    ),
    Endpoint("POST", "/memory/clear", {"user_id": "{user_id}"}, route="memory/clear"),
    Endpoint(
        "GET", "/memory/episodic/{memory_id}", route="memory/<str:memory_type>/<str:memory_id>"
    ),
    Endpoint(
        "GET",
        "/memory/episodic/{memory_id}/history",
        route="memory/<str:memory_type>/<str:memory_id>/history",
    ),
    Endpoint(
        "PATCH",
        "/memory/episodic/{memory_id}",
        {"summary": "edited"},
        route="memory/<str:memory_type>/<str:memory_id>",
    ),
    Endpoint(
        "DELETE", "/memory/episodic/{memory_id}", route="memory/<str:memory_type>/<str:memory_id>"
    ),
    # A skill deleted as a procedural memory (within its user).
    Endpoint(
        "DELETE",
        "/memory/procedural/skill-{skill_id}?user_id={user_id}",
        route="memory/<str:memory_type>/<str:memory_id>",
    ),
    Endpoint("DELETE", "/users/{user_id}/memories", route="users/<str:user_id>/memories"),
    Endpoint(
        "POST",
        "/memory/auto_dream?user_id={user_id}",
        {"mode": "procedural", "dry_run": True},
        route="memory/auto_dream",
    ),
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
    Endpoint(
        "POST",
        "/experiences",
        {"user_id": "{user_id}", "task": "fix the login", "action": "cache", "outcome": "success"},
        route="experiences",
    ),
    Endpoint(
        "POST",
        "/experiences/failure",
        {"user_id": "{user_id}", "task": "fix the login", "action": "retry", "reason": "flaky"},
        route="experiences/failure",
    ),
    Endpoint(
        "POST",
        "/experiences/conversation",
        {
            "user_id": "{user_id}",
            "messages": [
                {"role": "user", "content": "fix the login"},
                {"role": "assistant", "content": "added a cache"},
            ],
            "outcome": "success",
        },
        route="experiences/conversation",
    ),
    Endpoint(
        "GET",
        "/experiences/recall",
        params={"user_id": "{user_id}", "query": "login"},
        route="experiences/recall",
    ),
    Endpoint(
        "GET",
        "/experiences/recommend",
        params={"user_id": "{user_id}", "task": "login"},
        route="experiences/recommend",
    ),
    Endpoint(
        "GET", "/experiences/recent", params={"user_id": "{user_id}"}, route="experiences/recent"
    ),
    Endpoint(
        "GET", "/experiences/stats", params={"user_id": "{user_id}"}, route="experiences/stats"
    ),
    Endpoint(
        "GET",
        "/experiences/actions",
        params={"user_id": "{user_id}"},
        route="experiences/actions",
    ),
    Endpoint("GET", "/experiences/settings", route="experiences/settings"),
    Endpoint("PUT", "/experiences/settings", {"half_life_days": 30}, route="experiences/settings"),
    Endpoint("GET", "/experiences/{experience_id}", route="experiences/<str:experience_id>"),
    Endpoint(
        "GET",
        "/experiences/{experience_id}/history",
        route="experiences/<str:experience_id>/history",
    ),
    Endpoint("DELETE", "/experiences/{experience_id}", route="experiences/<str:experience_id>"),
    Endpoint(
        "POST",
        "/experiences/{experience_id}/supersede",
        {"by": "{experience_id}"},
        route="experiences/<str:experience_id>/supersede",
    ),
    Endpoint("GET", "/learning-runs", params={"user_id": "{user_id}"}, route="learning-runs"),
    Endpoint("POST", "/learning-runs", {"user_id": "{user_id}"}, route="learning-runs"),
    Endpoint("GET", "/learning-runs/{run_id}", route="learning-runs/<str:run_id>"),
    Endpoint("POST", "/learning-runs/{run_id}/retry", route="learning-runs/<str:run_id>/retry"),
    Endpoint("GET", "/skills", params={"user_id": "{user_id}"}, route="skills"),
    Endpoint(
        "POST",
        "/skills/retrieve",
        {"user_id": "{user_id}", "task": "load a csv file"},
        route="skills/retrieve",
        reads_only=True,
    ),
    Endpoint("GET", "/skills/export", params={"user_id": "{user_id}"}, route="skills/export"),
    Endpoint(
        "GET", "/skills/index.json", params={"user_id": "{user_id}"}, route="skills/index.json"
    ),
    Endpoint(
        "GET",
        "/.well-known/agent-skills/index.json",
        params={"user_id": "{user_id}"},
        route=".well-known/agent-skills/index.json",
    ),
    Endpoint("GET", "/skills/{skill_id}", route="skills/<str:skill_id>"),
    Endpoint(
        "PATCH",
        "/skills/{skill_id}",
        {"description": "Read CSV files, any encoding."},
        route="skills/<str:skill_id>",
    ),
    Endpoint("GET", "/skills/{skill_id}/SKILL.md", route="skills/<str:skill_id>/SKILL.md"),
    Endpoint("GET", "/skills/{skill_id}/versions", route="skills/<str:skill_id>/versions"),
    Endpoint(
        "GET",
        "/skills/{skill_id}/versions/1/diff",
        route="skills/<str:skill_id>/versions/<id:number>/diff",
    ),
    Endpoint(
        "POST",
        "/skills/{skill_id}/rollback",
        {"version": 1},
        route="skills/<str:skill_id>/rollback",
    ),
    Endpoint("POST", "/images", {"url": data_url(png_bytes(color=(1, 2, 3)))}, route="images"),
    Endpoint("GET", "/images/{image_id}", route="images/<sha256:sha256>"),
    Endpoint("GET", "/images/fetches/{fetch_id}", route="images/fetches/<id:fetch_id>"),
]

# Writes that name an object in their body (ENDPOINTS name theirs in the path), for the
# write-boundary check (tests/test_derived_data.py): each is asked with another client's object
# and with a missing one. ``{own_experience_id}``: the calling client's own. An image is its
# organization's, content-addressed (``images.selectors``): naming one crosses no client's
# boundary, and another organization's answers as a missing one (the other-tenant checks).
REFERENCE_WRITES = [
    Endpoint(
        "POST",
        "/skills/retrieve",
        {"user_id": "{user_id}", "task": "load a csv file", "session_id": "{session_id}"},
        route="skills/retrieve",
    ),
    *(
        Endpoint(
            "POST",
            "/experiences",
            {"user_id": "{user_id}", "task": "t", "action": "a", "outcome": "success", **refers},
            route="experiences",
        )
        for refers in (
            {"recommendation_id": "{recommendation_id}"},
            {"supersedes": "{experience_id}"},
        )
    ),
    Endpoint(
        "POST",
        "/experiences/{own_experience_id}/supersede",
        {"by": "{experience_id}"},
        route="experiences/<str:experience_id>/supersede",
    ),
    Endpoint(
        "POST",
        "/experiences/{experience_id}/supersede",
        {"by": "{own_experience_id}"},
        route="experiences/<str:experience_id>/supersede",
    ),
]

# Routes that are deliberately public or not part of the key-authenticated API.
UNAUTHENTICATED_ROUTES = {"health", "metrics", "api/schema/", "api/docs/"}


def placeholders_filled(value: Any, ids: dict[str, str]) -> Any:
    """A path, params or body with its ``{user_id}``-style placeholders filled from ``ids``."""
    if isinstance(value, str):
        return value.format(**ids) if ids else value
    if isinstance(value, dict):
        return {key: placeholders_filled(item, ids) for key, item in value.items()}
    if isinstance(value, list):
        return [placeholders_filled(item, ids) for item in value]
    return value


def call(api, endpoint: Endpoint, **ids: str):
    method = getattr(api, endpoint.method.lower())
    path = placeholders_filled(endpoint.path, ids)
    if endpoint.body is not None:
        return method(path, placeholders_filled(endpoint.body, ids), format="json")
    return method(path, placeholders_filled(endpoint.params, ids))


def body(response: Any) -> bytes:
    """A response's body, streamed (an export) or not."""
    if response.streaming:
        return b"".join(response.streaming_content)
    return response.content


def owned_ids(owner: TenantFixture, *, session_id: str = "owned-session") -> dict[str, str]:
    """Ids of objects that exist and belong to ``owner``, for the placeholders. Session ids
    are each client's own: two clients' ``owned_ids`` name two sessions with two of them."""
    user, _ = end_user_create_or_get(tenant=owner.tenant, user_id="owned-user", name=None)
    meta_agent, _ = meta_agent_initialize(
        tenant=owner.tenant,
        agent_settings=meta_agent_settings_from_provider(
            provider="openai", api_key=None, model=None
        ),
        update=True,
    )
    owner.api.post(
        "/memory/add",
        {
            "user_id": user.user_id,
            "session_id": session_id,
            "messages": chat_turns("hi", "hello"),
        },
        format="json",
    )
    memories_create(owner, user_id=user.user_id)
    episodic = EpisodicMemory.objects.filter(client=owner.client, end_user=user).first()
    experience = experiences_create(owner, user_id=user.user_id, recommended=True)
    recommendation = Recommendation.objects.filter(client=owner.client).latest("pk")
    image = image_create(owner)
    run = learning_run_create(owner, user_id=user.user_id)
    skill = skill_create(owner, user_id=user.user_id)
    fetch = image_fetch_request(
        organization=owner.organization, client=owner.client, url="https://images.test/a.png"
    )
    return {
        "user_id": user.user_id,
        "agent_id": meta_agent.pk,
        "session_id": session_id,
        "memory_id": str(episodic.pk),
        "experience_id": str(experience.pk),
        "recommendation_id": str(recommendation.pk),
        "image_id": image.sha256,
        "fetch_id": str(fetch.pk),
        "run_id": str(run.pk),
        "skill_id": str(skill.pk),
    }
