"""The experience embedding queue: commits push ids, one drain task per burst embeds them."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from mirix_site.common.redis import redis_client
from mirix_site.providers.embeddings import EmbeddingTransientError
from mirix_site.search.spaces import write_embedders
from skills import embedding_queue, tasks
from skills.embedding_queue import DRAINING, QUEUE, RECORDING, experiences_embed_drain
from skills.models import Experience
from skills.search import EXPERIENCE_KIND
from tests.factories import TenantFixture, tenant_fixture
from tests.skills.experiences import record

FLAGS = [DRAINING.format(slot=slot) for slot in range(4)]


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """An empty queue, and the slots of the drain tasks published, instead of publishing them."""
    redis_client().delete(QUEUE, RECORDING, *FLAGS)
    calls: list[int] = []

    def publish(name: str, slot: int) -> None:
        assert name == embedding_queue.DRAIN_TASK
        calls.append(slot)

    monkeypatch.setattr(embedding_queue, "task_publish", publish)
    yield calls
    redis_client().delete(QUEUE, *FLAGS)


def _queued() -> list[int]:
    return [int(value) for value in redis_client().lrange(QUEUE, 0, -1)]


def _embedded() -> set[int]:
    return set(EXPERIENCE_KIND.embedding_model.objects.values_list("experience_id", flat=True))


def test_a_burst_of_records_publishes_one_drain_that_embeds_them_all(
    org: TenantFixture,
    published: list[int],
    django_capture_on_commit_callbacks: Callable,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        singles = [
            record(org, task=f"Task {n}", action="Retry", outcome="success") for n in range(5)
        ]
        response = org.api.post(
            "/experiences",
            {
                "user_id": "ada",
                "experiences": [
                    {"task": f"Batch {n}", "action": "Restart", "outcome": "failure"}
                    for n in range(3)
                ],
            },
            format="json",
        )
    assert response.status_code == 201
    ids = [int(row["id"]) for row in singles] + [
        int(row["id"]) for row in response.json()["experiences"]
    ]
    assert _queued() == ids
    assert published == [0]
    assert experiences_embed_drain(embedders=write_embedders()) == (8, False)
    assert _embedded() == set(ids)
    assert _queued() == [] and not redis_client().exists(*FLAGS)
    # The drain is over: the next record starts another.
    with django_capture_on_commit_callbacks(execute=True):
        record(org, task="Later", action="Retry", outcome="success")
    assert published == [0, 0]


def test_a_long_queue_is_drained_a_task_at_a_time_with_helpers_beside(
    org: TenantFixture, published: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedding_queue, "BATCH", 2)
    monkeypatch.setattr(embedding_queue, "BATCHES_PER_TASK", 2)
    monkeypatch.setattr(settings, "EXPERIENCE_EMBED_DRAINS", 2)
    ids = [
        int(record(org, task=f"Task {n}", action="Retry", outcome="success")["id"])
        for n in range(7)
    ]
    redis_client().rpush(QUEUE, *ids)
    redis_client().set(FLAGS[0], 1)
    # A full batch with more behind it starts the drain of slot 1, once; after two batches of
    # two the rest is left for the slot's next task, its flag kept for it.
    assert experiences_embed_drain(embedders=write_embedders(), slot=0) == (4, True)
    assert published == [1]
    assert _queued() == ids[4:] and redis_client().exists(FLAGS[0], FLAGS[1]) == 2
    # Slot 1 takes the other three in its two batches; its next task finds the queue empty.
    assert experiences_embed_drain(embedders=write_embedders(), slot=1) == (3, True)
    assert published == [1]  # slot 0 still held: no other drain
    assert _embedded() == set(ids)
    assert experiences_embed_drain(embedders=write_embedders(), slot=1) == (0, False)
    assert not redis_client().exists(FLAGS[1]) and redis_client().exists(FLAGS[0])
    assert experiences_embed_drain(embedders=write_embedders(), slot=0) == (0, False)
    assert not redis_client().exists(*FLAGS)


def test_a_drain_waits_for_records_to_stop_arriving_but_not_for_ever(
    org: TenantFixture, published: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [
        int(record(org, task=f"Task {n}", action="Retry", outcome="success")["id"])
        for n in range(2)
    ]
    embedded_while_recording: list[bool] = []
    embed = embedding_queue.experiences_embed

    def embedding(**arguments: object) -> int:
        embedded_while_recording.append(bool(redis_client().exists(RECORDING)))
        return embed(**arguments)

    monkeypatch.setattr(embedding_queue, "experiences_embed", embedding)
    redis_client().rpush(QUEUE, ids[0])
    redis_client().set(RECORDING, 1, px=400)  # a record a moment ago
    assert experiences_embed_drain(embedders=write_embedders()) == (1, False)
    assert embedded_while_recording == [False]
    # Records that never stop arriving hold a batch back YIELD_SECONDS, then it is embedded.
    monkeypatch.setattr(embedding_queue, "YIELD_SECONDS", 0.3)
    redis_client().rpush(QUEUE, ids[1])
    redis_client().set(RECORDING, 1)
    assert experiences_embed_drain(embedders=write_embedders()) == (1, False)
    assert embedded_while_recording == [False, True]
    assert _embedded() == set(ids)


class _Overloaded:
    def __init__(self, embedder: object) -> None:
        self.embedder = embedder

    def __getattr__(self, name: str) -> object:
        return getattr(self.embedder, name)

    def embed(self, texts: list[str]) -> list[list[float]]:
        raise EmbeddingTransientError("429 from the provider")


def test_a_batch_whose_embedding_fails_goes_back_to_the_queue(
    org: TenantFixture, published: list[int]
) -> None:
    ids = [
        int(record(org, task=f"Task {n}", action="Retry", outcome="success")["id"])
        for n in range(3)
    ]
    redis_client().rpush(QUEUE, *ids[2:])
    redis_client().lpush(QUEUE, *reversed(ids[:2]))
    with pytest.raises(EmbeddingTransientError):
        experiences_embed_drain(embedders=[_Overloaded(write_embedders()[0])])
    assert sorted(_queued()) == ids
    assert _embedded() == set()


class _Broken(_Overloaded):
    def embed(self, texts: list[str]) -> list[list[float]]:
        raise ValueError("the provider answered 3 vectors for 2 texts")


def test_a_batch_that_fails_for_good_is_left_to_the_sweep_and_the_rest_embedded(
    org: TenantFixture, published: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedding_queue, "BATCH", 2)
    ids = [
        int(record(org, task=f"Task {n}", action="Retry", outcome="success")["id"])
        for n in range(4)
    ]
    redis_client().rpush(QUEUE, *ids)
    embedder = write_embedders()[0]
    calls = iter([_Broken(embedder), embedder])
    real = embedding_queue.experiences_embed

    def embedding(*, experience_ids: list[int], embedders: list) -> int:
        return real(experience_ids=experience_ids, embedders=[next(calls)])

    monkeypatch.setattr(embedding_queue, "experiences_embed", embedding)
    assert experiences_embed_drain(embedders=[embedder]) == (2, False)
    assert _queued() == []
    assert _embedded() == set(ids[2:])  # the first batch waits for the sweep


def test_with_redis_unreachable_a_record_is_stored_and_the_sweep_embeds_it(
    org: TenantFixture,
    published: list[int],
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Callable,
    caplog: pytest.LogCaptureFixture,
) -> None:
    unreachable = redis.Redis(port=1, socket_connect_timeout=0.5)
    monkeypatch.setattr(embedding_queue, "redis_client", lambda: unreachable)
    with caplog.at_level(logging.WARNING), django_capture_on_commit_callbacks(execute=True):
        made = record(org, task="Fix the login timeout", action="Add a cache", outcome="success")
    assert "not queued for embedding" in caplog.text
    assert published == []
    row = Experience.objects.get(pk=int(made["id"]))
    Experience.objects.filter(pk=row.pk).update(created_at=timezone.now() - timedelta(minutes=5))
    assert tasks.embed_pending_experiences() == 1
    assert _embedded() == {row.pk}


def test_the_worker_embeds_records_through_the_queue(worker: None) -> None:
    owner = tenant_fixture("alice")
    ids = [
        int(record(owner, task=f"Fix timeout {n}", action="Add a cache", outcome="success")["id"])
        for n in range(12)
    ]
    deadline = timezone.now() + timedelta(seconds=60)
    while (_embedded() != set(ids) or redis_client().exists(*FLAGS)) and (
        timezone.now() < deadline
    ):
        threading.Event().wait(0.1)
    # All embedded, and the drain ended itself with the queue empty.
    assert _embedded() == set(ids)
    assert _queued() == [] and not redis_client().exists(*FLAGS)
