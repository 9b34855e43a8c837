"""Phrasings of one action pool their evidence in recommend; opposites, other numbers and a
step's negation stay apart (skills.services.grouping; issue 41)."""

from __future__ import annotations

import pytest

from skills.models import ActionPhrase
from tests.factories import TenantFixture
from tests.skills.experiences import embed_all, record, record_many

TASK = "session lookups are slow"
# The 5% bound of Beta(3.5, 0.5) as skills.confidence computes it (issue 41 quoted 0.5573).
THREE_SUCCESSES = 0.5559
REDIS = (
    "Added a Redis cache in front of session lookups",
    "add redis caching for sessions",
    "put a Redis cache before the session store",
)


def recommend(owner: TenantFixture, task: str) -> dict:
    response = owner.api.get("/experiences/recommend", {"user_id": "ada", "task": task})
    assert response.status_code == 200, response.json()
    return response.json()


def test_three_phrasings_of_one_action_pool_into_one_after_embedding(
    org: TenantFixture,
) -> None:
    record_many(org, [{"task": TASK, "action": a, "outcome": "success"} for a in REDIS])
    body = recommend(org, TASK)
    assert body["counts"]["success"] == 3 and body["confidence"] == THREE_SUCCESSES
    assert body["runners_up"] == []
    groups = set(ActionPhrase.objects.values_list("group_key", flat=True))
    assert len(groups) == 1


def test_they_pool_before_the_worker_embeds_them(org: TenantFixture) -> None:
    for action in REDIS:
        record(org, task=TASK, action=action, outcome="success")
    assert not ActionPhrase.objects.exists()
    body = recommend(org, TASK)
    assert body["counts"]["success"] == 3 and body["confidence"] == THREE_SUCCESSES
    embed_all()  # and the worker's grouping agrees
    assert recommend(org, TASK)["confidence"] == THREE_SUCCESSES


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("increase the batch size", "decrease the batch size"),
        ("enable caching", "disable caching"),
        ("retry 3 times", "retry 5 times"),
        ("retry the request", "do not retry the request"),
        ("add a redis cache", "add a memcached cache"),
    ],
)
def test_opposites_stay_apart(org: TenantFixture, first: str, second: str) -> None:
    task = "the training job is unstable"
    record_many(
        org,
        [
            {"task": task, "action": first, "outcome": "success"},
            {"task": task, "action": second, "outcome": "success"},
        ],
    )
    body = recommend(org, task)
    assert body["counts"]["total"] == 1
    assert len(body["runners_up"]) == 1 and body["runners_up"][0]["counts"]["total"] == 1
    assert len(set(ActionPhrase.objects.values_list("group_key", flat=True))) == 2


def test_a_new_phrasing_joins_and_old_ones_never_move(org: TenantFixture) -> None:
    record_many(org, [{"task": TASK, "action": REDIS[0], "outcome": "success"}])
    before = dict(ActionPhrase.objects.values_list("key", "group_key"))
    record_many(org, [{"task": TASK, "action": a, "outcome": "failure"} for a in REDIS[1:]])
    after = dict(ActionPhrase.objects.values_list("key", "group_key"))
    assert {k: after[k] for k in before} == before
    assert set(after.values()) == set(before.values())
