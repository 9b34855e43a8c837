"""The published MIRIX client (mirix==0.1.7), unmodified, against a live server."""

from __future__ import annotations

import pytest
import requests
from mirix import MirixClient

from tests.factories import tenant_fixture
from tests.memory.test_agents_api import QUICKSTART_CONFIG

pytestmark = pytest.mark.django_db(transaction=True)


def test_quickstart_setup_calls_succeed(live_server) -> None:
    alice = tenant_fixture("alice")
    client = MirixClient(api_key=alice.key, base_url=live_server.url, max_retries=0)

    assert client.create_or_get_user(user_id="demo-user", user_name="Demo User") == "demo-user"
    assert client.create_or_get_user(user_id="demo-user") == "demo-user"
    generated = client.create_or_get_user(user_name="Anonymous")
    assert generated.startswith("user-")

    agent = client.initialize_meta_agent(config=QUICKSTART_CONFIG)
    assert agent.id.startswith("agent-")
    assert agent.llm_config.model == "gemini-3.6-flash"
    assert agent.embedding_config.embedding_dim == 768
    assert [block.label for block in agent.memory.blocks] == ["human", "persona"]
    assert {child.agent_type.value for child in agent.children} >= {"episodic_memory_agent"}

    again = client.initialize_meta_agent(provider="openai", api_key="sk-test")
    assert again.id == agent.id
    assert [listed.id for listed in client.list_agents()] == [agent.id]
    assert client.get_agent(agent.id).id == agent.id


def test_bad_key_surfaces_as_the_clients_http_error(live_server) -> None:
    client = MirixClient(api_key="mxk_nope", base_url=live_server.url, max_retries=0)
    with pytest.raises(requests.HTTPError, match="Missing or invalid API key"):
        client.initialize_meta_agent(provider="openai")
