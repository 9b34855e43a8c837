"""Agents as MIRIX answers them ([18/18] items 4-6 and 8), through the published client.

MIRIX's side is ``mirix/server/rest_api.py`` of MIRIX's ``dev`` branch @66d27f8:
``list_agents`` (line 469, ``parent_id``), ``update_agent_system_prompt_by_name`` (634-730:
the updated agent, or 404 "Agent with name '…' not found for client …. Available agents: …"),
and its tests ``tests/test_agent_prompt_update.py`` (sub-agents read with
``GET /agents?parent_id=<meta agent id>``, the prompt read back from them)."""

from __future__ import annotations

import pytest
import requests

from memory.models import AgentPromptVersion, MetaAgent
from tests.mirix_compat.conftest import Mirix, mirix_client

pytestmark = pytest.mark.django_db(transaction=True)


def _children(mirix: Mirix) -> dict:
    (meta_agent,) = mirix.client.list_agents()
    # As test_agent_prompt_update.py reads them: the raw list, parsed with 0.1.7's AgentState.
    children = mirix.client.list_agents(parent_id=meta_agent.id, limit=1000)
    return {child.name: child for child in children}


def test_an_agent_named_as_mirix_names_it_gets_a_new_system_prompt(mirix: Mirix) -> None:
    meta_agent = MetaAgent.objects.get(client=mirix.tenant.client)
    before = _children(mirix)["meta_memory_agent_episodic_memory_agent"].system

    updated = mirix.client.update_system_prompt(
        agent_name="episodic", system_prompt="Note only what the user states."
    )

    # MIRIX main's name (agent_manager.py: meta agent name + type), which its tests read.
    assert updated.name == "meta_memory_agent_episodic_memory_agent"
    assert updated.agent_type.value == "episodic_memory_agent"
    assert updated.system == "Note only what the user states." != before
    assert updated.parent_id == meta_agent.pk
    # Read back as MIRIX's tests do, and as the meta agent's child.
    assert (
        _children(mirix)["meta_memory_agent_episodic_memory_agent"].system
        == "Note only what the user states."
    )
    assert mirix.client.get_agent(updated.id).system == "Note only what the user states."
    # Every name MIRIX documents for it (rest_api.py 645-655) names the same agent.
    for name in ("episodic_memory_agent", "meta_memory_agent_episodic_memory_agent"):
        again = mirix.client.update_system_prompt(agent_name=name, system_prompt=f"By {name}.")
        assert again.id == updated.id and again.system == f"By {name}."
    knowledge = mirix.client.update_system_prompt(agent_name="knowledge", system_prompt="Vault.")
    assert knowledge.agent_type.value == "knowledge_memory_agent"
    # Kept as sent (MIRIX's test_update_agent_system_prompt compares the prompt whole).
    kept = mirix.client.update_system_prompt(agent_name="semantic", system_prompt=" Facts.\n")
    assert kept.system == " Facts.\n"
    meta = mirix.client.update_system_prompt(agent_name="meta_memory_agent", system_prompt="Meta.")
    assert meta.id == meta_agent.pk and meta.system == "Meta."
    assert mirix.client.list_agents()[0].system == "Meta."

    # Kept, each change a version of its agent.
    versions = AgentPromptVersion.objects.filter(meta_agent=meta_agent)
    assert list(
        versions.filter(agent_type="episodic_memory_agent").values_list("number", "system")
    ) == [
        (1, "Note only what the user states."),
        (2, "By episodic_memory_agent."),
        (3, "By meta_memory_agent_episodic_memory_agent."),
    ]
    assert versions.filter(agent_type="meta_memory_agent").count() == 1


def test_an_unknown_agent_name_is_404_naming_it_and_the_agents_there_are(mirix: Mirix) -> None:
    with pytest.raises(requests.HTTPError) as refused:
        mirix.client.update_system_prompt(agent_name="reflexion", system_prompt="x")

    message = str(refused.value)
    assert "404" in str(refused.value.__cause__)
    assert "Agent with name 'reflexion' not found for client" in message
    assert "meta_memory_agent_episodic_memory_agent" in message
    assert not AgentPromptVersion.objects.exists()


def test_an_agent_of_another_client_is_missing_by_id_and_by_name(mirix: Mirix, live_server) -> None:
    from tests.factories import tenant_fixture

    other = tenant_fixture("other-client")
    episodic = _children(mirix)["meta_memory_agent_episodic_memory_agent"]
    response = other.api.patch(
        f"/agents/{episodic.id}/system", {"system_prompt": "mine now"}, format="json"
    )
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found.", "code": "not_found"}
    # By name, a client names its own agents only: one without a meta agent has none.
    response = other.api.patch(
        "/agents/by-name/episodic/system", {"system_prompt": "mine now"}, format="json"
    )
    assert response.status_code == 404 and "has no meta agent" in response.json()["detail"]
    assert not AgentPromptVersion.objects.exists()
    # Once it has its own, the name is its own agent's.
    mirix_client(other, live_server.url).update_system_prompt(
        agent_name="episodic", system_prompt="mine"
    )
    assert _children(mirix)["meta_memory_agent_episodic_memory_agent"].system != "mine"


def test_list_agents_with_parent_id_lists_its_sub_agents(mirix: Mirix) -> None:
    (meta_agent,) = mirix.client.list_agents()
    children = mirix.client.list_agents(parent_id=meta_agent.id)

    # list_agents (469-512) filters by parent_id: the meta agent's sub-agents, not itself.
    assert meta_agent.parent_id is None
    assert {child.parent_id for child in children} == {meta_agent.id}
    assert sorted(child.id for child in children) == sorted(c.id for c in meta_agent.children)
    assert "episodic_memory_agent" in {child.agent_type.value for child in children}
    # A sub-agent has none; an unknown or another client's id names none.
    assert mirix.client.list_agents(parent_id=children[0].id) == []
    assert mirix.client.list_agents(parent_id="agent-00000000-0000-0000-0000-000000000000") == []


def test_agents_name_the_client_that_created_them(mirix: Mirix) -> None:
    (meta_agent,) = mirix.client.list_agents()

    # MIRIX's agents carry created_by_id, the creating actor (its client): never null.
    assert meta_agent.created_by_id == mirix.tenant.client.pk
    assert {child.created_by_id for child in meta_agent.children} == {mirix.tenant.client.pk}


def test_mains_knowledge_agent_name_configures_the_same_agent(live_server) -> None:
    from tests.factories import tenant_fixture

    tenant = tenant_fixture("main-client")
    client = mirix_client(tenant, live_server.url)
    # MIRIX main's name for the vault's agent (mirix/schemas/agent.py on main:
    # knowledge_vault_memory_agent); 0.1.7's is knowledge_memory_agent. Either configures it.
    agent = client.initialize_meta_agent(
        config={"meta_agent_config": {"agents": ["knowledge_vault_memory_agent"]}},
        update_agents=True,
    )
    assert [child.agent_type.value for child in agent.children] == ["knowledge_memory_agent"]
    assert MetaAgent.objects.get(client=tenant.client).memory_components == ["knowledge_vault"]
