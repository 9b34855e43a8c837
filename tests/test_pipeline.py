"""The ingest pipeline end to end: real Redis, a real Celery worker, the live HTTP server."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from mirix import MirixClient

from memory.models import EpisodicMemory, ExtractionJob
from memory.services import extraction_jobs_recover
from mirix_site import launcher
from sessions.models import Message
from tests.factories import chat_turns, tenant_fixture
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


def test_turns_added_while_redis_is_down_are_processed_when_it_returns(worker) -> None:
    alice = tenant_fixture("alice")
    redis_dir = Path(launcher.data_dir()) / "redis"
    launcher.redis_stop(redis_dir)
    try:
        began = time.monotonic()
        response = alice.api.post(
            "/memory/add",
            {
                "user_id": "sam",
                "messages": chat_turns("Redis is down but I am not", "Stored anyway"),
            },
            format="json",
        )
        assert response.status_code == 202
        assert time.monotonic() - began < 5  # no hanging on the broker
        assert Message.objects.filter(extraction="pending").count() == 2
        assert ExtractionJob.objects.filter(status="queued").count() == 1
    finally:
        launcher.redis_ensure(redis_dir)

    # What the beat job does for work older than EXTRACTION_REQUEUE_AFTER.
    assert extraction_jobs_recover(older_than=timedelta(0)) == 1
    wait_until(lambda: not Message.objects.filter(extraction="pending").exists())
    assert EpisodicMemory.objects.get().summary == "user: Redis is down but I am not"
    assert ExtractionJob.objects.get().status == "succeeded"
