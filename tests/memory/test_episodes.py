"""Episodes a retriever can use, however a client sends the conversation: one add per session
with two roles, or one add per turn as role ``user`` with the speaker in the text. An episode
is bounded (turns, the embedder's tokens, a pause), never mixes scope tags (filter tags but
a turn's own ids: tests/memory/test_turn_tags.py), and names its speakers from ``name`` or a
leading ``"<name>: "``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memory.models import EpisodicMemory, ExtractionJob
from memory.services import extraction_job_run
from mirix_site.providers.embeddings import embedding_provider_from_settings
from tests.factories import TenantFixture

START = datetime(2026, 5, 1, 18, 0, tzinfo=UTC)


def add_turn(org: TenantFixture, text: str, *, minutes: float = 0, **body: Any) -> int:
    """One add of one turn, as a client that sends every turn as it comes does."""
    response = org.api.post(
        "/memory/add",
        {
            "user_id": "sam",
            "messages": [{"role": "user", "content": text}],
            "occurred_at": (START + timedelta(minutes=minutes)).isoformat(),
            **body,
        },
        format="json",
    )
    assert response.status_code == 202, response.json()
    [message_id] = response.json()["message_ids"]
    return int(message_id)


def extract() -> list[EpisodicMemory]:
    for job in ExtractionJob.objects.filter(status=ExtractionJob.Status.QUEUED).order_by("id"):
        extraction_job_run(organization_id=job.organization_id, job_id=job.pk)
    return list(EpisodicMemory.objects.order_by("occurred_at", "id"))


def episode_of(message_id: int, episodes: list[EpisodicMemory]) -> EpisodicMemory:
    [episode] = [episode for episode in episodes if message_id in episode.source_message_ids]
    return episode


def test_turns_sent_one_by_one_pair_up_as_exchanges_of_their_speakers(
    org: TenantFixture,
) -> None:
    lines = [
        "Caroline: I went to the LGBTQ support group yesterday.",
        "Melanie: That sounds powerful! How did it feel?",
        "Caroline: Really inspiring, the stories stayed with me.",
        "Melanie: I'm glad you went.",
    ]
    ids = [add_turn(org, line, minutes=index) for index, line in enumerate(lines)]

    episodes = extract()

    assert [episode.source_message_ids for episode in episodes] == [ids[:2], ids[2:]]
    first, second = episodes
    assert first.actor == "Caroline"
    assert first.details.splitlines() == lines[:2]  # "Caroline: ...", not "user: Caroline: ..."
    assert first.summary.startswith("Caroline: I went to the LGBTQ")
    # The second replies to the first's last turn, named by its speaker.
    assert second.details.startswith("(replying to Melanie: That sounds powerful!")


def test_the_speaker_is_read_from_name_and_from_the_text_alike(org: TenantFixture) -> None:
    response = org.api.post(
        "/memory/add",
        {
            "user_id": "sam",
            "messages": [
                {"role": "user", "name": "Caroline", "content": "I adopted a cat named Oscar."},
                {"role": "user", "content": "Melanie: Oscar is a great name."},
                # Not a name: a label, a lower-case word, a time.
                {"role": "user", "name": "Caroline", "content": "Note: he is shy"},
            ],
        },
        format="json",
    )
    assert response.status_code == 202
    [episode, later] = extract()

    assert episode.details.splitlines() == [
        "Caroline: I adopted a cat named Oscar.",
        "Melanie: Oscar is a great name.",
    ]
    assert later.details.splitlines()[-1] == "Caroline: Note: he is shy"
    unnamed = [
        add_turn(org, text, minutes=600 + index)
        for index, text in enumerate(
            ["Note: buy milk", "remember: the keys", "At 10:30: the dentist"]
        )
    ]
    lines = [episode_of(unnamed[0], extract()).details]
    assert lines == ["user: Note: buy milk\nuser: remember: the keys\nuser: At 10:30: the dentist"]


def test_one_speaker_talking_on_never_grows_an_episode_past_its_bound(
    org: TenantFixture, settings
) -> None:
    # Consecutive turns of one speaker are ordinary; and one long turn is an episode alone.
    ids = [
        add_turn(org, f"Caroline: part {index} of the story about the camping trip to the lake.")
        for index in range(10)
    ]
    long_turn = "Melanie: " + " ".join(f"word{index}" for index in range(400))
    long_id = add_turn(org, long_turn)
    reply_id = add_turn(org, "Caroline: wow, that is a lot.")

    episodes = extract()

    counter = embedding_provider_from_settings()
    assert sorted(i for episode in episodes for i in episode.source_message_ids) == sorted(
        [*ids, long_id, reply_id]
    )
    for episode in episodes:
        assert len(episode.source_message_ids) <= settings.EPISODE_MAX_TURNS
        if episode.source_message_ids != [long_id]:
            assert counter.count_tokens(episode.details) <= settings.EPISODE_MAX_TOKENS
    assert episode_of(long_id, episodes).source_message_ids == [long_id]
    assert len([episode for episode in episodes if set(ids) & set(episode.source_message_ids)]) >= 3


def test_token_bound_cuts_an_exchange_of_long_turns(org: TenantFixture, settings) -> None:
    settings.EPISODE_MAX_TOKENS = 64
    words = " ".join(["lantern"] * 40)  # each turn alone fits, no two together
    ids = [add_turn(org, f"{speaker}: {words}") for speaker in ("Ann", "Bob", "Ann", "Bob")]

    episodes = extract()

    counter = embedding_provider_from_settings()
    assert all(counter.count_tokens(episode.details) <= 64 for episode in episodes)
    assert [i for episode in episodes for i in episode.source_message_ids] == ids
    assert len(episodes) == 4


def test_adds_with_different_filter_tags_never_share_an_episode(org: TenantFixture) -> None:
    first = add_turn(org, "Ann: the launch code name is bluebird", filter_tags={"project": "a"})
    second = add_turn(org, "Bob: noted, bluebird it is", filter_tags={"project": "b"})
    third = add_turn(org, "Ann: and the date is June 3", filter_tags={"project": "b"})

    episodes = extract()

    assert episode_of(first, episodes) != episode_of(second, episodes)
    tagged_b = episode_of(second, episodes)
    assert tagged_b.source_message_ids == [second, third]
    assert tagged_b.filter_tags == {"project": "b"}
    # Nor does its reply context bring project a's text under project b's tags.
    assert "launch code" not in tagged_b.details
    assert episode_of(first, episodes).filter_tags == {"project": "a"}


@pytest.mark.parametrize("pause_minutes", [45, 60 * 24])
def test_a_pause_ends_an_episode(org: TenantFixture, pause_minutes: int) -> None:
    first = add_turn(org, "Ann: are you coming to the picnic?")
    reply = add_turn(org, "Bob: yes, with a pie", minutes=1)
    later = add_turn(org, "Bob: the pie got burnt", minutes=1 + pause_minutes)

    episodes = extract()

    assert episode_of(first, episodes).source_message_ids == [first, reply]
    resumed = episode_of(later, episodes)
    assert resumed.source_message_ids == [later]
    assert "(replying to" not in resumed.details


def test_a_session_sent_whole_with_two_roles_keeps_its_exchanges(org: TenantFixture) -> None:
    messages = []
    for index in range(3):
        messages += [
            {"role": "user", "content": f"question {index} about the garden"},
            {"role": "assistant", "content": f"answer {index} about the roses"},
        ]
    response = org.api.post("/memory/add", {"user_id": "sam", "messages": messages}, format="json")
    ids = [int(value) for value in response.json()["message_ids"]]

    episodes = extract()

    assert [episode.source_message_ids for episode in episodes] == [
        ids[0:2],
        ids[2:4],
        ids[4:6],
    ]
    assert episodes[1].details.splitlines()[1:] == [
        "user: question 1 about the garden",
        "assistant: answer 1 about the roses",
    ]


def test_an_ai_assistants_long_reply_is_kept_to_its_beginning(org: TenantFixture, settings) -> None:
    settings.EPISODE_REPLY_CHARS = 120
    reply = "For a spring trip to Kyoto, pack light layers and comfortable shoes. " * 20
    response = org.api.post(
        "/memory/add",
        {
            "user_id": "sam",
            "messages": [
                {"role": "user", "content": "I fly to Kyoto in April with my sister Ana."},
                {"role": "assistant", "content": reply},
                # A named participant is a person, whatever the role they were sent under.
                {"role": "user", "content": "What about Ana?"},
                {"role": "assistant", "name": "Melanie", "content": reply},
            ],
        },
        format="json",
    )
    assert response.status_code == 202
    ids = [int(value) for value in response.json()["message_ids"]]
    # The same conversation one turn per add, the speaker in the text.
    add_turn(org, "user: I fly to Kyoto in April with my sister Ana.", minutes=60 * 24)
    sent_as_turn = add_turn(org, f"assistant: {reply}", minutes=60 * 24)

    episodes = extract()
    first, named, turns = (episode_of(i, episodes) for i in (ids[1], ids[3], sent_as_turn))

    kept = first.details.splitlines()
    assert kept[0] == "user: I fly to Kyoto in April with my sister Ana."
    assert kept[1].startswith("assistant: For a spring trip to Kyoto") and kept[1].endswith(" …")
    assert len(kept[1]) <= len("assistant: ") + 120 + 2
    assert named.details.splitlines()[-1] == f"Melanie: {reply}"
    assert turns.details.splitlines()[1] == kept[1]


@pytest.mark.parametrize("reply", [" " * 400 + "late text", "x" * 400, "\n\n" + "word " * 100])
def test_a_reply_of_any_shape_is_cut_without_error(
    org: TenantFixture, settings, reply: str
) -> None:
    settings.EPISODE_REPLY_CHARS = 120
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": reply}]
    response = org.api.post("/memory/add", {"user_id": "sam", "messages": messages}, format="json")
    assert response.status_code == 202

    [episode] = extract()

    kept = episode.details.split("\nassistant: ", 1)[1]
    assert kept.endswith(" …") and len(kept) <= 120 + 2
