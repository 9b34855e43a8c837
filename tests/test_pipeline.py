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
        return components["memories"]["episodic"]

    wait_until(lambda: len(episodic()) == 1)
    [memory] = episodic()
    assert "The moon now has a president." in memory["summary"]
    assert memory["source_message_ids"] == [
        str(i) for i in sorted(int(x) for x in memory["source_message_ids"])
    ]
    components = client.list_memory_components(user_id="demo-user")
    assert set(components["memories"]) >= {"core", "episodic", "semantic", "resource"}
