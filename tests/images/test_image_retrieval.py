"""Retrieval with images: memories name the images of the turns they came from, and a
conversation that shows an image without words finds the memories of turns that showed it
(no model here reads images), or, with a model that reads them, searches for what it names."""

from __future__ import annotations

import base64

import pytest

from images.models import ImageObject
from images.validation import image_validate
from memory.models import EpisodicMemory, ExtractionJob
from memory.services import extraction_job_run
from tests.factories import TenantFixture, data_url, png_bytes
from tests.loopback import LoopbackServer, Reply, openai_reply

CAT = png_bytes(color=(200, 150, 90), size=(12, 12))
DOG = png_bytes(color=(30, 30, 30), size=(12, 12))


def _image(data: bytes) -> dict[str, object]:
    return {"type": "image_url", "image_url": {"url": data_url(data)}}


def _exchange(api, user_content: object, reply: str, *, session_id: str) -> None:
    response = api.post(
        "/memory/add",
        {
            "user_id": "u1",
            "session_id": session_id,
            "messages": [
                {"role": "user", "content": user_content},
                {"role": "assistant", "content": reply},
            ],
        },
        format="json",
    )
    assert response.status_code == 202, response.content
    for job in ExtractionJob.objects.filter(status="queued"):
        extraction_job_run(organization_id=job.organization_id, job_id=job.pk)


def _retrieve(api, *content: object) -> dict:
    response = api.post(
        "/memory/retrieve/conversation",
        {"user_id": "u1", "messages": [{"role": "user", "content": list(content)}], "limit": 3},
        format="json",
    )
    assert response.status_code == 200, response.content
    return response.json()


@pytest.fixture
def remembered(org: TenantFixture) -> dict[str, EpisodicMemory]:
    """Three exchanges: one showing the cat picture, then two later ones without images."""
    _exchange(
        org.api,
        [{"type": "text", "text": "This is Tom, my tabby cat"}, _image(CAT)],
        "What a handsome cat!",
        session_id="cat",
    )
    _exchange(org.api, "I repaired the bike's chain", "Nice work.", session_id="bike")
    _exchange(org.api, "We booked a trip to Porto", "Enjoy Porto!", session_id="porto")
    by_text = {}
    for memory in EpisodicMemory.objects.filter(client=org.client):
        for word in ("Tom", "bike", "Porto"):
            if word in f"{memory.summary} {memory.details}":
                by_text[word] = memory
    assert set(by_text) == {"Tom", "bike", "Porto"}, [m.summary for m in by_text.values()]
    return by_text


def test_memories_name_the_images_of_their_turns(
    org: TenantFixture, remembered: dict[str, EpisodicMemory]
) -> None:
    cat = ImageObject.objects.get()
    listed = org.api.get(
        "/memory/components", {"user_id": "u1", "memory_type": "episodic", "limit": 10}
    ).json()["memories"]["episodic"]["items"]
    by_id = {memory["id"]: memory for memory in listed}
    assert by_id[str(remembered["Tom"].pk)]["image_ids"] == [cat.sha256]
    assert by_id[str(remembered["bike"].pk)]["image_ids"] == []
    found = org.api.get("/memory/search", {"user_id": "u1", "query": "tabby cat Tom"}).json()
    assert found["results"][0]["image_ids"] == [cat.sha256]


def test_an_image_alone_finds_the_memories_of_turns_that_showed_it(
    org: TenantFixture, remembered: dict[str, EpisodicMemory]
) -> None:
    cat = ImageObject.objects.get()
    for shown in (_image(CAT), {"type": "image", "image_id": cat.sha256}):
        episodic = _retrieve(org.api, shown)["memories"]["episodic"]["relevant"]
        # The cat's memory first, though it is the oldest; then the most recent others.
        assert [memory["id"] for memory in episodic] == [
            str(remembered[word].pk) for word in ("Tom", "Porto", "bike")
        ]
        assert episodic[0]["image_ids"] == [cat.sha256]


def test_an_unknown_image_alone_gives_the_most_recent_memories(
    org: TenantFixture, remembered: dict[str, EpisodicMemory]
) -> None:
    episodic = _retrieve(org.api, _image(DOG))["memories"]["episodic"]["relevant"]
    assert [memory["id"] for memory in episodic] == [
        str(remembered[word].pk) for word in ("Porto", "bike", "Tom")
    ]
    assert not ImageObject.objects.filter(byte_size=len(DOG)).exists()  # nothing stored


def test_another_users_turns_showing_the_image_are_not_used(
    org: TenantFixture, remembered: dict[str, EpisodicMemory], other_org: TenantFixture
) -> None:
    other_org.api.post(
        "/memory/add",
        {"user_id": "u1", "messages": [{"role": "user", "content": [_image(CAT)]}]},
        format="json",
    )
    episodic = _retrieve(other_org.api, _image(CAT))["memories"]["episodic"]["relevant"]
    assert not {memory["id"] for memory in episodic} & {str(m.pk) for m in remembered.values()}


@pytest.fixture
def vision_llm(loopback: LoopbackServer, settings) -> LoopbackServer:
    settings.LLM_PROVIDER = "openai"
    settings.LLM_MODEL = "vision-model"
    settings.LLM_API_BASE = f"{loopback.url}/v1"
    settings.LLM_API_KEY = "sk-loopback"
    settings.LLM_VISION = True
    return loopback


def test_a_model_that_reads_images_names_the_topics_searched(
    org: TenantFixture, vision_llm: LoopbackServer, settings
) -> None:
    settings.LLM_PROVIDER = "none"  # the memories, extracted without a model
    _exchange(org.api, "I repaired the bike's chain", "Nice work.", session_id="bike")
    _exchange(org.api, "We booked a trip to Porto", "Enjoy Porto!", session_id="porto")
    settings.LLM_PROVIDER = "openai"
    vision_llm.respond(
        lambda _request: Reply(
            200, openai_reply({"topics": ["bicycle chain"], "temporal_expression": None})
        )
    )

    episodic = _retrieve(org.api, _image(DOG))["memories"]["episodic"]["relevant"]

    [request] = vision_llm.requests
    shown = image_validate(data=DOG, max_bytes=10**6).data  # what the store keeps of it
    assert request.json["messages"][-1]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": f"data:image/png;base64,{base64.b64encode(shown).decode()}"},
    }
    assert "bike" in episodic[0]["summary"] + episodic[0]["details"]


def test_without_vision_the_model_is_not_shown_images(
    org: TenantFixture, vision_llm: LoopbackServer, settings
) -> None:
    settings.LLM_VISION = False
    settings.LLM_PROVIDER = "none"
    _exchange(org.api, "I repaired the bike's chain", "Nice work.", session_id="bike")
    settings.LLM_PROVIDER = "openai"
    vision_llm.respond(
        lambda _request: Reply(200, openai_reply({"topics": ["cat"], "temporal_expression": None}))
    )
    _retrieve(org.api, {"type": "text", "text": "who is this?"}, _image(CAT))
    [request] = vision_llm.requests
    assert request.json["messages"][-1]["content"] == "user: who is this?"
