"""Memory answers in MIRIX's shapes ([18/18] items 1-3), read through the published client.

MIRIX's side is ``mirix/server/rest_api.py`` of MIRIX's ``dev`` branch @66d27f8 (what the 0.1.7
wheel was built from): ``retrieve_memories_by_keywords`` (line 2407, the ``memories`` of both
retrieve routes), ``list_memory_components`` (3559), ``search_memory`` (2913, ``query: str =
""``) and ``search_memory_all_users`` (3239, its answer at 3539)."""

from __future__ import annotations

import pytest
import requests

from accounts.services import client_read_scopes_set
from memory.models import EpisodicMemory, ExtractionJob, SemanticMemory
from memory.services import extraction_job_run
from tests.factories import chat_turns
from tests.mirix_compat.conftest import USER_ID, Mirix, mirix_client

pytestmark = pytest.mark.django_db(transaction=True)

# retrieve_memories_by_keywords: episodic {"total_count", "recent", "relevant"} (2488-2510),
# every other type {"total_count", "items"} (2529-2656), the vault under "knowledge" (2622).
OTHER_TYPES = ("semantic", "resource", "procedural", "knowledge", "core")


def _mirix_memories_shape(memories: dict) -> None:
    episodic = memories["episodic"]
    assert isinstance(episodic["total_count"], int)
    assert isinstance(episodic["recent"], list) and isinstance(episodic["relevant"], list)
    for name in OTHER_TYPES:
        assert isinstance(memories[name]["total_count"], int), name
        assert isinstance(memories[name]["items"], list), name
        # The sample viewer (samples/mirix_memory_viewer.py) reads each group with .get().
        assert memories[name].get("items") is not None


def test_retrieve_by_topic_answers_a_group_per_type(mirix: Mirix) -> None:
    answer = mirix.client.retrieve_with_topic(user_id=USER_ID, topic="draft")

    memories = answer["memories"]
    _mirix_memories_shape(memories)
    episodes = EpisodicMemory.objects.filter(client=mirix.tenant.client)
    assert memories["episodic"]["total_count"] == episodes.count() >= 1
    # recent: the latest episodes, whatever the topic, with MIRIX's "timestamp" (2489-2497).
    assert [e["id"] for e in memories["episodic"]["recent"]] == [
        str(e.pk) for e in episodes.order_by("-occurred_at", "-id")
    ]
    assert all(e["timestamp"] for e in memories["episodic"]["recent"])
    assert any("draft" in e["summary"].lower() for e in memories["episodic"]["relevant"])
    assert memories["semantic"]["total_count"] == 1
    assert [block["value"] for block in memories["core"]["items"]] == ["Sam likes tea."]
    # The vault under MIRIX's name and ours, the same items, the secret masked.
    assert memories["knowledge"] == memories["knowledge_vault"]
    assert memories["knowledge"]["total_count"] >= 1


def test_retrieve_with_conversation_answers_a_group_per_type(mirix: Mirix) -> None:
    answer = mirix.client.retrieve_with_conversation(
        user_id=USER_ID, messages=chat_turns("Where is the draft?")[:1]
    )

    _mirix_memories_shape(answer["memories"])
    assert any("draft" in e["summary"].lower() for e in answer["memories"]["episodic"]["relevant"])
    # MIRIX's topics: a string (2820), null when none were read.
    assert isinstance(answer["topics"], str) and "draft" in answer["topics"]


def test_memory_components_answer_total_count_and_items(mirix: Mirix) -> None:
    answer = mirix.client.list_memory_components(user_id=USER_ID, limit=1)

    # list_memory_components (3559): each type {"total_count", "items"} (3635-3740).
    memories = answer["memories"]
    for name in ("episodic", *OTHER_TYPES):
        assert isinstance(memories[name]["total_count"], int), name
        assert len(memories[name]["items"]) <= 1, name
    assert memories["semantic"]["total_count"] == SemanticMemory.objects.count() == 1
    assert memories["knowledge"] == memories["knowledge_vault"]


def test_an_empty_query_lists_the_newest_memories(mirix: Mirix) -> None:
    # A second, later episode: the newest must come first.
    mirix.client.add(user_id=USER_ID, messages=chat_turns("I booked the flight to Oslo.", "Ok."))
    from memory.models import ExtractionJob
    from memory.services import extraction_job_run

    for job in ExtractionJob.objects.filter(status="queued"):
        extraction_job_run(organization_id=job.organization_id, job_id=job.pk)

    # search_memory (2913): query defaults to "", and an empty query lists (MIRIX's tests
    # enumerate a user's memories that way).
    answer = mirix.client.search(user_id=USER_ID, query="", memory_type="episodic", limit=10)
    assert answer["success"] and answer["query"] == ""
    listed = [int(result["id"]) for result in answer["results"]]
    newest_first = EpisodicMemory.objects.order_by("-created_at", "-id").values_list(
        "pk", flat=True
    )
    assert listed == list(newest_first) and len(listed) == 2
    everything = mirix.client.search(user_id=USER_ID, query="")
    kinds = {result["memory_type"] for result in everything["results"]}
    assert {"episodic", "semantic", "procedural", "resource", "knowledge_vault"} <= kinds

    across = mirix.client.search_all_users(query="", memory_type="semantic")
    assert [result["summary"] for result in across["results"]] == ["Sam likes tea."]
    assert across["filter_tags"] == {"scope": mirix.tenant.client.pk}
    # The query still has its own limits: blank is not "anything goes".
    with pytest.raises(requests.HTTPError, match="query"):
        mirix.client.search(user_id=USER_ID, query="x" * 10_001)


def test_search_all_users_names_the_scope_as_both_clients_read_it(
    mirix: Mirix, live_server
) -> None:
    answer = mirix.client.search_all_users(query="tea", filter_tags={"topic": "drinks"})

    client_id = mirix.tenant.client.pk
    assert answer["client_id"] == client_id
    assert answer["organization_id"] == mirix.tenant.organization.pk
    # 0.1.7's server (3539-3554): client_scope a string; filter_tags as searched, with the
    # scope it adds (3315). main's server names the scopes read (rest_api.py "read_scopes").
    assert answer["client_scope"] == client_id
    assert answer["filter_tags"] == {"topic": "drinks", "scope": client_id}
    assert answer["read_scopes"] == [client_id]
    # The scope is the answer's, not a filter a memory must carry: untagged memories are found.
    untagged = mirix.client.search_all_users(query="tea")
    assert untagged["filter_tags"] == {"scope": client_id}
    assert {result["summary"] for result in untagged["results"]} == {"Sam likes tea.", "Brew tea"}
    # A client reads its own scope and those its read scopes name.
    sibling = mirix.tenant.another_client("sibling")
    client_read_scopes_set(client=mirix.tenant.client, scopes=[sibling.client])
    scoped = mirix_client(mirix.tenant, live_server.url).search_all_users(query="tea")
    assert scoped["client_scope"] == client_id
    assert scoped["read_scopes"] == sorted([client_id, sibling.client.pk])


def test_mains_include_core_memory_answers_the_blocks_beside_what_was_found(mirix: Mirix) -> None:
    # MIRIX main's client sends include_core_memory (and block_filter_tags) to both searches;
    # its server appends each block as {memory_type: core, id, user_id, label, value, scope}
    # (main's rest_api.py, search_memory and search_memory_all_users). 0.1.7 never sends it.
    api = mirix.tenant.api
    plain = api.get("/memory/search", {"user_id": USER_ID, "query": "tea"}).json()
    assert "core" not in {result["memory_type"] for result in plain["results"]}

    asked = api.get(
        "/memory/search", {"user_id": USER_ID, "query": "tea", "include_core_memory": "true"}
    ).json()
    (core,) = [result for result in asked["results"] if result["memory_type"] == "core"]
    assert (core["user_id"], core["label"], core["value"]) == (USER_ID, "human", "Sam likes tea.")
    assert core["scope"] == mirix.tenant.client.pk
    assert asked["count"] == len(asked["results"]) == plain["count"] + 1

    across = api.get(
        "/memory/search_all_users",
        {"query": "tea", "include_core_memory": "true", "block_filter_tags": '{"team": "a"}'},
    ).json()
    assert "core" not in {result["memory_type"] for result in across["results"]}
    bad = api.get(
        "/memory/search_all_users",
        {"query": "tea", "include_core_memory": "true", "block_filter_tags": "{not json"},
    )
    assert bad.status_code == 422 and "block_filter_tags" in bad.json()["fields"]


def test_a_client_keeping_its_message_ids_as_tags_finds_each_turns_episode(mirix: Mirix) -> None:
    # One add per turn, each tagged with the client's own message id beside its session.
    turns = [
        ("Caroline", "I went to the LGBTQ support group yesterday."),
        ("Melanie", "That sounds powerful! How did it feel?"),
        ("Caroline", "Really inspiring, the stories stayed with me."),
        ("Melanie", "I'm glad you went."),
    ]
    for index, (speaker, text) in enumerate(turns):
        mirix.client.add(
            user_id="kai",
            messages=chat_turns(f"{speaker}: {text}")[:1],
            filter_tags={"session_id": "chat-1", "message_id": f"m{index}"},
        )
    for job in ExtractionJob.objects.filter(status="queued"):
        extraction_job_run(organization_id=job.organization_id, job_id=job.pk)

    episodes = EpisodicMemory.objects.filter(end_user__user_id="kai").order_by("occurred_at")
    assert [len(episode.source_message_ids) for episode in episodes] == [2, 2]
    later = episodes[1]
    answer = mirix.client.search(
        user_id="kai", query="inspiring stories", filter_tags={"message_id": "m3"}
    )
    assert [result["id"] for result in answer["results"]] == [str(later.pk)]
    assert {"session_id": "chat-1", "message_id": "m3"} in answer["results"][0]["turn_tags"]
    by_topic = mirix.client.retrieve_with_topic(
        user_id="kai", topic="support group", filter_tags={"message_id": "m0"}
    )
    relevant = by_topic["memories"]["episodic"]["relevant"]
    assert [episode["id"] for episode in relevant] == [str(episodes[0].pk)]
