"""Evidence that does not wait for the worker: what recommend counts and recall returns right
after recording (no worker: the rows stay unembedded) is what they count and return once the
rows are embedded, ordering aside."""

from __future__ import annotations

import threading
from datetime import timedelta

from django.utils import timezone

from mirix_site.search.models import GateCalibration
from skills.models import Experience, ExperienceEmbedding
from tests.factories import TenantFixture, tenant_fixture
from tests.skills.experiences import embed_all

RECORDED_TASK = "login page times out under load"
# The same task as another agent would word it: shares "login", "page" and "time" with it.
PARAPHRASE = "the login page keeps timing out when traffic spikes"


def _record(owner: TenantFixture, outcomes: str, *, action: str = "add a redis cache") -> None:
    names = {"s": "success", "f": "failure", "p": "partial"}
    items = [{"task": RECORDED_TASK, "action": action, "outcome": names[o]} for o in outcomes]
    response = owner.api.post(
        "/experiences", {"user_id": "ada", "experiences": items}, format="json"
    )
    assert response.status_code == 201, response.json()


def _recommend(owner: TenantFixture, task: str = PARAPHRASE) -> dict:
    response = owner.api.get("/experiences/recommend", {"user_id": "ada", "task": task})
    assert response.status_code == 200, response.json()
    return response.json()


def _recall(owner: TenantFixture, query: str, k: int) -> list[dict]:
    response = owner.api.get("/experiences/recall", {"user_id": "ada", "query": query, "k": k})
    assert response.status_code == 200, response.json()
    return response.json()["results"]


def test_recommend_counts_every_identical_row_before_the_worker_embeds_them(
    org: TenantFixture,
) -> None:
    _record(org, "sssssssssf")
    assert not ExperienceEmbedding.objects.exists()  # no worker: nothing is embedded yet
    body = _recommend(org)
    assert body["found"] is True and body["action"] == "add a redis cache"
    assert body["counts"] == {"success": 9, "failure": 1, "partial": 0, "total": 10}
    assert body["confidence"] == 0.6694
    assert len(body["supporting_experience_ids"]) == 10
    # The same answer once the worker has embedded them.
    embed_all()
    assert ExperienceEmbedding.objects.count() == 10
    after = _recommend(org)
    assert after["counts"] == body["counts"] and after["confidence"] == 0.6694
    assert set(after["supporting_experience_ids"]) == set(body["supporting_experience_ids"])


def test_recall_returns_the_same_rows_before_and_after_embedding(org: TenantFixture) -> None:
    _record(org, "sssss")
    _record(org, "ff", action="raise the nginx worker count")
    # Unrelated to the query in words and meaning: neither lane brings it.
    response = org.api.post(
        "/experiences",
        {
            "user_id": "ada",
            "task": "bake a sourdough loaf",
            "action": "proof it overnight",
            "outcome": "success",
        },
        format="json",
    )
    assert response.status_code == 201
    before = {row["id"] for row in _recall(org, PARAPHRASE, k=10)}
    assert len(before) == 7
    embed_all()
    assert {row["id"] for row in _recall(org, PARAPHRASE, k=10)} == before


def test_rows_that_tie_at_the_gates_cut_all_pass(org: TenantFixture) -> None:
    """Nothing is similar enough to pass on its similarity, so only BM25's top 3 would: twelve
    identical rows have one BM25 score, and a cut after the third of them would be arbitrary."""
    _record(org, "ssssssssssff")
    embed_all()
    GateCalibration.objects.update(min_similarity=0.99, strong_similarity=1.5)
    body = _recommend(org, RECORDED_TASK)
    assert body["counts"] == {"success": 10, "failure": 2, "partial": 0, "total": 12}
    results = _recall(org, RECORDED_TASK, k=10)
    assert len(results) == 10  # the limit still holds
    assert {row["gate"] for row in results} == {"kept_bm25_top3"}


def test_the_worker_embeds_and_the_counts_stay(worker: None) -> None:
    owner = tenant_fixture("alice")
    _record(owner, "sssssssssf")
    right_after = _recommend(owner)
    deadline = timezone.now() + timedelta(seconds=60)
    while ExperienceEmbedding.objects.count() < 10 and timezone.now() < deadline:
        threading.Event().wait(0.1)
    assert ExperienceEmbedding.objects.count() == Experience.objects.count() == 10
    embedded = _recommend(owner)
    for body in (right_after, embedded):
        assert body["counts"] == {"success": 9, "failure": 1, "partial": 0, "total": 10}
        assert body["confidence"] == 0.6694
