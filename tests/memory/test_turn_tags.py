"""Filter tags that name one turn (a client keeping its own message ids as tags, the settings'
``TURN_TAG_KEYS``) beside tags that scope (a project): turns that differ only in their ids
make the episodes turns without ids make, whether the worker reads them one batch at a time or
many, and a filter naming one turn's id finds the memory citing it; turns of two scopes still
never share a memory, nor does one show the other's text."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.apps import apps

from accounts.services import end_user_create_or_get
from memory.extractors import Proposal
from memory.models import EpisodicMemory, SemanticMemory
from memory.services import memories_store
from memory.services.records import Owner
from mirix_site.providers.embeddings import embedding_provider_from_settings
from tests.factories import TenantFixture
from tests.memory.test_episodes import add_turn, episode_of, extract

CONVERSATION = [
    "Caroline: I went to the LGBTQ support group yesterday.",
    "Melanie: That sounds powerful! How did it feel?",
    "Caroline: Really inspiring, the stories stayed with me.",
    "Melanie: I'm glad you went.",
]
SESSION = {"session": "s1"}


def own_ids(index: int) -> dict[str, Any]:
    return {**SESSION, "message_id": f"m{index}"}


def scope_only(index: int) -> dict[str, Any]:
    return dict(SESSION)


def send(
    org: TenantFixture,
    user_id: str,
    tags_of: Callable[[int], dict[str, Any]],
    *,
    batch_per_turn: bool,
    lines: list[str] = CONVERSATION,
) -> list[int]:
    """The conversation, one add per turn; with ``batch_per_turn`` the worker extracts each
    turn before the next comes (a batch of one), else all of them in one batch."""
    ids = []
    for index, line in enumerate(lines):
        ids.append(add_turn(org, line, minutes=index, user_id=user_id, filter_tags=tags_of(index)))
        if batch_per_turn:
            extract()
    extract()
    return ids


def episodes_of(user_id: str) -> list[EpisodicMemory]:
    return list(
        EpisodicMemory.objects.filter(end_user__user_id=user_id).order_by("occurred_at", "id")
    )


def search(org: TenantFixture, filter_tags: dict[str, Any], **params: Any) -> list[dict]:
    query = {
        "user_id": "sam",
        "query": "Caroline",
        "memory_type": "episodic",
        "filter_tags": json.dumps(filter_tags),
        **params,
    }
    response = org.api.get("/memory/search", query)
    assert response.status_code == 200, response.json()
    return response.json()["results"]


@pytest.mark.parametrize("batch_per_turn", [False, True], ids=["one batch", "a batch per turn"])
def test_turns_carrying_their_own_ids_make_the_episodes_turns_without_them_make(
    org: TenantFixture, batch_per_turn: bool
) -> None:
    ids = send(org, "sam", own_ids, batch_per_turn=batch_per_turn)
    send(org, "kim", scope_only, batch_per_turn=batch_per_turn)

    with_ids, without = episodes_of("sam"), episodes_of("kim")
    assert [episode.details for episode in with_ids] == [episode.details for episode in without]
    if batch_per_turn:
        # A batch of one turn is an episode of one, opening with the turn it replies to.
        assert [episode.source_message_ids for episode in with_ids] == [[i] for i in ids]
        assert with_ids[1].details.splitlines() == [
            "(replying to Caroline: I went to the LGBTQ support group yesterday.)",
            CONVERSATION[1],
        ]
        assert with_ids[1].filter_tags == own_ids(1)
    else:
        assert [episode.source_message_ids for episode in with_ids] == [ids[:2], ids[2:]]
        assert with_ids[1].details.startswith("(replying to Melanie: That sounds powerful!")
        # The tags both turns carry, and each turn's own.
        assert with_ids[1].filter_tags == SESSION
        assert with_ids[1].turn_tags == [own_ids(2), own_ids(3)]


def test_a_search_filtered_by_one_turns_id_finds_the_episode_citing_it(org: TenantFixture) -> None:
    ids = send(org, "sam", own_ids, batch_per_turn=False)
    episodes = episodes_of("sam")

    for index, message_id in enumerate(ids):
        cited = [str(i) for i in episode_of(message_id, episodes).source_message_ids]
        for method in ("bm25", "embedding", "hybrid"):
            found = search(org, {"message_id": f"m{index}"}, search_method=method)
            assert [result["source_message_ids"] for result in found] == [cited], method
        # With the scope too, as a client sends what it tagged the turn with.
        [result] = search(org, own_ids(index))
        assert result["source_message_ids"] == cited
        assert own_ids(index) in result["turn_tags"]
    assert search(org, {"message_id": "m9"}) == []
    assert search(org, {"session": "s2", "message_id": "m1"}) == []
    assert len(search(org, SESSION)) == 2
    # The listing of a query with no topic words filters alike.
    [listed] = search(org, {"message_id": "m3"}, query="")
    assert listed["source_message_ids"] == [str(i) for i in ids[2:]]


@pytest.mark.parametrize("batch_per_turn", [False, True], ids=["one batch", "a batch per turn"])
def test_scope_tags_keep_turns_apart_whatever_ids_they_carry(
    org: TenantFixture, batch_per_turn: bool
) -> None:
    lines = [
        "Ann: the launch code name is bluebird",
        "Bob: noted, bluebird it is",
        "Ann: and the date is June 3",
    ]
    projects = ["a", "b", "b"]
    first, second, third = send(
        org,
        "sam",
        lambda index: {"project": projects[index], "message_id": f"m{index}"},
        batch_per_turn=batch_per_turn,
        lines=lines,
    )

    episodes = episodes_of("sam")
    assert episode_of(first, episodes).source_message_ids == [first]
    tagged_b = episode_of(third, episodes)
    assert "launch code" not in tagged_b.details
    if not batch_per_turn:
        assert tagged_b.source_message_ids == [second, third]
        assert tagged_b.filter_tags == {"project": "b"}
    for method in ("bm25", "embedding", "hybrid"):
        found = search(org, {"project": "a"}, query="bluebird", search_method=method)
        assert [result["source_message_ids"] for result in found] == [[str(first)]], method
        assert not any("noted" in result["details"] for result in found)
        found = search(org, {"project": "b"}, query="launch code bluebird", search_method=method)
        assert found and not any("launch code" in result["details"] for result in found)


def test_only_the_keys_the_settings_name_are_a_turns_own(org: TenantFixture, settings) -> None:
    def other_ids(index: int) -> dict[str, Any]:
        return {**SESSION, "mid": f"m{index}"}

    send(org, "sam", other_ids, batch_per_turn=False)
    # Unnamed, a key whose value changes with every turn is a scope like any other.
    assert [len(episode.source_message_ids) for episode in episodes_of("sam")] == [1, 1, 1, 1]
    assert not any("(replying to" in episode.details for episode in episodes_of("sam"))

    settings.TURN_TAG_KEYS = frozenset({"mid"})
    send(org, "kim", other_ids, batch_per_turn=False)
    assert [len(episode.source_message_ids) for episode in episodes_of("kim")] == [2, 2]


def test_memories_stored_before_turn_tags_are_found_by_their_tags(org: TenantFixture) -> None:
    user, _ = end_user_create_or_get(tenant=org.tenant, user_id="sam", name=None)
    memories_store(
        owner=Owner(org.organization.pk, org.client.pk, user.pk),
        proposals=[
            Proposal("semantic", {"name": "Tea", "summary": "Sam prefers green tea"}, [1]),
        ],
        embedders=[embedding_provider_from_settings()],
        enabled_types={"semantic"},
    )
    # As a row written before the column was: its add's tags alone.
    SemanticMemory.objects.update(filter_tags={"project": "a"}, turn_tags=[])
    assert search(org, {"project": "a"}, query="green tea", memory_type="semantic") == []

    migration = importlib.import_module("memory.migrations.0017_memory_turn_tags")
    migration.turn_tags_backfill(apps, None)

    assert SemanticMemory.objects.get().turn_tags == [{"project": "a"}]
    [found] = search(org, {"project": "a"}, query="green tea", memory_type="semantic")
    assert found["summary"] == "Sam prefers green tea"
