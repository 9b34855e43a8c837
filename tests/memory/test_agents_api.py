from __future__ import annotations

import json

from memory.crypto import secret_decrypt
from memory.models import MetaAgent
from tests.factories import TenantFixture

QUICKSTART_CONFIG = {
    "llm_config": {
        "model": "gemini-3.6-flash",
        "model_endpoint_type": "google_ai",
        "api_key": "llm-secret-123",
        "model_endpoint": "https://generativelanguage.googleapis.com",
        "context_window": 1_000_000,
    },
    "embedding_config": {
        "embedding_model": "gemini-embedding-001",
        "embedding_endpoint_type": "google_ai",
        "api_key": "embedding-secret-456",
        "embedding_endpoint": "https://generativelanguage.googleapis.com",
        "embedding_dim": 768,
    },
    "meta_agent_config": {
        "agents": [
            {
                "core_memory_agent": {
                    "blocks": [
                        {"label": "human", "value": ""},
                        {"label": "persona", "value": "I am a helpful assistant."},
                    ]
                }
            },
            "resource_memory_agent",
            "semantic_memory_agent",
            "episodic_memory_agent",
        ],
    },
}


def initialize(org: TenantFixture, **body):  # noqa: ANN003
    return org.api.post("/agents/meta/initialize", body, format="json")


def test_initialize_with_config_stores_it_and_answers_an_agent_state(org: TenantFixture) -> None:
    response = initialize(org, config=QUICKSTART_CONFIG, update_agents=True)
    assert response.status_code == 201
    state = response.json()
    assert state["id"].startswith("agent-")
    assert state["agent_type"] == "meta_memory_agent"
    assert state["organization_id"] == org.organization.pk
    assert state["llm_config"]["model"] == "gemini-3.6-flash"
    assert state["embedding_config"]["embedding_dim"] == 768
    assert [block["label"] for block in state["memory"]["blocks"]] == ["human", "persona"]
    assert [child["agent_type"] for child in state["children"]] == [
        "core_memory_agent",
        "episodic_memory_agent",
        "semantic_memory_agent",
        "resource_memory_agent",
    ]
    assert all(child["parent_id"] == state["id"] for child in state["children"])

    meta_agent = MetaAgent.objects.get(pk=state["id"])
    assert meta_agent.client == org.client
    assert meta_agent.memory_components == ["core", "episodic", "semantic", "resource"]
    # Provider keys are stored encrypted, never in the config JSON, never echoed back.
    assert "llm-secret-123" not in json.dumps(response.json())
    assert "llm-secret-123" not in json.dumps(meta_agent.llm_config)
    assert "llm-secret-123" not in meta_agent.llm_api_key_encrypted
    assert secret_decrypt(meta_agent.llm_api_key_encrypted) == "llm-secret-123"
    assert secret_decrypt(meta_agent.embedding_api_key_encrypted) == "embedding-secret-456"


def test_initialize_with_provider_uses_its_defaults(org: TenantFixture) -> None:
    response = initialize(org, provider="openai", api_key="sk-abc", model="gpt-4o")
    assert response.status_code == 201
    state = response.json()
    assert state["llm_config"]["model"] == "gpt-4o"
    assert state["llm_config"]["model_endpoint_type"] == "openai"
    assert state["embedding_config"]["embedding_model"] == "text-embedding-3-small"
    assert len(state["children"]) == 6


def test_reinitialize_updates_only_when_asked(org: TenantFixture) -> None:
    created = initialize(org, provider="openai").json()
    kept = initialize(org, provider="anthropic", update_agents=False)
    assert kept.status_code == 200
    assert kept.json()["id"] == created["id"]
    assert kept.json()["llm_config"]["model_endpoint_type"] == "openai"
    updated = initialize(org, provider="anthropic", update_agents=True)
    assert updated.status_code == 200
    assert updated.json()["id"] == created["id"]
    assert updated.json()["llm_config"]["model_endpoint_type"] == "anthropic"
    assert updated.json()["embedding_config"] is None
    assert MetaAgent.objects.filter(client=org.client).count() == 1


def test_initialize_without_a_configuration_takes_the_servers(org: TenantFixture) -> None:
    for body in ({}, {"config": {}}, {"config": None}):
        response = org.api.post("/agents/meta/initialize", body, format="json")
        assert response.status_code in (200, 201), response.content
        assert response.json()["llm_config"]["model"] == "deterministic"


def test_initialize_rejects_what_it_cannot_understand(org: TenantFixture) -> None:
    cases = [
        ({"provider": "nobody"}, "provider"),
        ({"config": {"llm_config": {"model": ""}}}, "config.llm_config.model"),
        (
            {"config": {"llm_config": {"model": "m", "model_endpoint_type": "telepathy"}}},
            "config.llm_config.model_endpoint_type",
        ),
        (
            {"config": {"embedding_config": {"embedding_model": "unknown-model"}}},
            "config.embedding_config.embedding_dim",
        ),
        # Kept values are of the types the AgentState answers them in.
        (
            {"config": {"llm_config": {"model": "m", "temperature": "warm"}}},
            "config.llm_config.temperature",
        ),
        (
            {"config": {"llm_config": {"model": "m", "context_window": True}}},
            "config.llm_config.context_window",
        ),
        ({"config": {"llm_config": {"model": "m", "api_key": 42}}}, "config.llm_config.api_key"),
        ({"config": {"meta_agent_config": 0}}, "config.meta_agent_config"),
        # A provider wins over a config, which must still be one.
        (
            {"provider": "openai", "config": {"llm_config": {"model": 7}}},
            "config.llm_config.model",
        ),
        (
            {"config": {"meta_agent_config": {"agents": [{"core_memory_agent": 5}]}}},
            "config.meta_agent_config.agents.0.core_memory_agent",
        ),
        (
            {"config": {"meta_agent_config": {"agents": ["mind_reader"]}}},
            "config.meta_agent_config.agents.0",
        ),
        (
            {
                "config": {
                    "meta_agent_config": {"agents": [{"core_memory_agent": {"blocks": [{}]}}]}
                }
            },
            "config.meta_agent_config.agents.0.blocks.0.label",
        ),
    ]
    for body, field in cases:
        response = initialize(org, **body)
        assert response.status_code == 422, body
        assert field in response.json()["fields"], (body, response.json())
    assert not MetaAgent.objects.exists()


def test_list_and_get_agents(org: TenantFixture, other_org: TenantFixture) -> None:
    state = initialize(org, config=QUICKSTART_CONFIG).json()
    initialize(other_org, provider="openai")
    listed = org.api.get("/agents").json()
    assert [agent["id"] for agent in listed] == [state["id"]]
    assert org.api.get(f"/agents/{state['id']}").json() == state
    child = state["children"][1]
    fetched_child = org.api.get(f"/agents/{child['id']}").json()
    assert fetched_child["agent_type"] == "episodic_memory_agent"
    assert fetched_child["parent_id"] == state["id"]


def test_another_client_of_the_same_org_cannot_see_the_agent(org: TenantFixture) -> None:
    state = initialize(org, provider="openai").json()
    sibling = org.another_client("sibling")
    assert sibling.api.get("/agents").json() == []
    assert sibling.api.get(f"/agents/{state['id']}").status_code == 404
