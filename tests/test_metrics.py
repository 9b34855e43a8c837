"""GET /metrics: what Prometheus scrapes, read as it reads it."""

from __future__ import annotations

from datetime import timedelta

from django.test import Client as DjangoClient
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from memory.models import ExtractionJob
from mirix_site.common.redis import redis_client
from tests.factories import TenantFixture, chat_turns, learning_run_create


def scrape(client: DjangoClient, **headers: str) -> dict[tuple[str, tuple], float]:
    """Every sample of a scrape, by name and labels."""
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def _requests(samples: dict, route: str, method: str, status: str) -> float:
    labels = (("method", method), ("route", route), ("status", status))
    return samples.get(("mirix_http_requests_total", labels), 0.0)


def test_requests_are_counted_and_timed_by_route(org: TenantFixture, client) -> None:
    before = scrape(client)
    assert org.api.get("/users").status_code == 200
    assert org.api.get("/users/nobody").status_code == 404
    assert org.api.get("/no/such/path").status_code == 404
    after = scrape(client)

    def grew(route: str, status: str) -> float:
        return _requests(after, route, "GET", status) - _requests(before, route, "GET", status)

    assert grew("users", "200") == 1
    assert grew("users/<str:user_id>", "404") == 1
    assert grew("unmatched", "404") == 1  # a path that matched nothing is not a label
    timed = ("mirix_http_request_duration_seconds_count", (("method", "GET"), ("route", "users")))
    assert after[timed] - before.get(timed, 0.0) == 1
    # The buckets of that route and method (the suite's other requests add to them), cumulative.
    buckets = sorted(
        (float(dict(labels)["le"]), value)
        for (name, labels), value in after.items()
        if name == "mirix_http_request_duration_seconds_bucket"
        and dict(labels)["route"] == "users"
        and dict(labels)["method"] == "GET"
    )
    counts = [value for _bound, value in buckets]
    assert counts == sorted(counts)
    assert buckets[-1] == (float("inf"), after[timed])


def test_waiting_work_is_read_at_each_scrape(org: TenantFixture, client) -> None:
    redis = redis_client()
    queued = ("mirix_queue_length", (("queue", "maintenance"),))
    before = scrape(client)[queued]
    redis.lpush("maintenance", "probe")
    try:
        assert scrape(client)[queued] == before + 1
    finally:
        redis.lrem("maintenance", 1, "probe")

    org.api.post(
        "/memory/add", {"user_id": "sam", "messages": chat_turns("hi", "hello")}, format="json"
    )
    ExtractionJob.objects.update(created_at=timezone.now() - timedelta(minutes=5))
    learning_run_create(org, user_id="sam")
    samples = scrape(client)
    assert (
        samples[("mirix_extraction_jobs_waiting", ())]
        == ExtractionJob.objects.filter(status="queued").count()
        >= 1
    )
    assert 300 <= samples[("mirix_extraction_lag_seconds", ())] < 400
    assert samples[("mirix_learning_runs", (("state", "queued"),))] == 1
    assert samples[("mirix_learning_runs", (("state", "running"),))] == 0
    assert samples[("mirix_component_up", (("component", "database"),))] == 1
    assert samples[("mirix_component_up", (("component", "redis"),))] == 1


def test_a_scrape_without_redis_still_answers(db, client, settings) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    redis_client.cache_clear()
    try:
        samples = scrape(client)
    finally:
        redis_client.cache_clear()
    assert samples[("mirix_component_up", (("component", "redis"),))] == 0
    assert samples[("mirix_component_up", (("component", "database"),))] == 1
    assert not [name for name, _ in samples if name == "mirix_queue_length"]


def test_a_token_guards_the_scrape(db, client, settings) -> None:
    settings.METRICS_TOKEN = "s3cret-token"
    refused = client.get("/metrics")
    assert refused.status_code == 401
    assert refused.json() == {
        "detail": "A scrape sends Authorization: Bearer <METRICS_TOKEN>.",
        "code": "not_authenticated",
    }
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert scrape(client, Authorization="Bearer s3cret-token")
    posted = client.post("/metrics")
    assert posted.status_code == 405
    assert posted.json()["code"] == "method_not_allowed"
