"""The ingest pipeline end to end: real Redis, a real Celery worker, the live HTTP server."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from mirix import MirixClient

from tests.factories import tenant_fixture
from tests.memory.test_agents_api import QUICKSTART_CONFIG

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def wait_until(condition: Callable[[], bool], *, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the worker")
        time.sleep(0.2)


def test_the_mirix_quickstart_sees_its_episodic_memories(live_server, worker) -> None:
    alice = tenant_fixture("alice")
    client = MirixClient(api_key=alice.key, base_url=live_server.url, max_retries=0)
    client.initialize_meta_agent(config=QUICKSTART_CONFIG)
    response = client.add(
        user_id="demo-user",
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": "The moon now has a president."}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "Noted."}]},
        ],
    )
    assert response["status"] == "queued"
    assert response["message_count"] == 2

    def episodic() -> list[dict]:
        components = client.list_memory_components(user_id="demo-user")
        return components["memories"]["episodic"]["items"]

    wait_until(lambda: len(episodic()) == 1)
    [memory] = episodic()
    assert "The moon now has a president." in memory["summary"]
    assert memory["source_message_ids"] == [
        str(i) for i in sorted(int(x) for x in memory["source_message_ids"])
    ]
    components = client.list_memory_components(user_id="demo-user")
    assert set(components["memories"]) >= {"core", "episodic", "semantic", "resource"}


def test_a_remote_image_in_a_turn_is_fetched_by_the_worker(
    live_server, worker, loopback, settings
) -> None:
    """The MIRIX client sends a turn showing an http image; the worker (ingest queue) fetches
    it through the guard (``localhost`` allowed to reach loopback) and the turn names it."""
    from tests.factories import png_bytes
    from tests.loopback import Reply

    settings.IMAGE_FETCH_ALLOW_HOSTS = ["localhost"]
    loopback.respond(lambda _request: Reply(200, png_bytes(), {"Content-Type": "image/png"}))
    url = loopback.url.replace("127.0.0.1", "localhost") + "/photo.png"
    alice = tenant_fixture("alice")
    client = MirixClient(api_key=alice.key, base_url=live_server.url, max_retries=0)
    client.initialize_meta_agent(config=QUICKSTART_CONFIG)
    client.add(
        user_id="demo-user",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Our new office"},
                    {"type": "image_url", "image_url": {"url": url}},
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "Looks bright."}]},
        ],
        filter_tags={"session_id": "office"},
    )

    def images() -> list[dict]:
        response = alice.api.get("/sessions/office/messages", {"user_id": "demo-user"})
        return response.json()["results"][0]["images"]

    wait_until(lambda: images()[0]["status"] != "pending")
    [image] = images()
    assert image["status"] == "stored", image
    assert alice.api.get(f"/images/{image['image_id']}").status_code == 200
    assert [request.path for request in loopback.requests] == ["/photo.png"]
