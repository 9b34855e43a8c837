"""Action groups, visible and curated: GET /experiences/actions lists a user's groups with their
phrasings and counts; an operator merges groups and splits a phrasing out in the admin, and
recommend pools (or not) accordingly, for later recordings too (issue 41)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext

from mirix_site.common.history import history_of
from skills.confidence import lower_bounds
from skills.models import ActionPhrase
from skills.services.grouping import action_key
from tests.factories import TenantFixture
from tests.skills.experiences import record_many

TASK = "session lookups are slow"
REDIS = (
    "Added a Redis cache in front of session lookups",
    "add redis caching for sessions",
    "put a Redis cache before the session store",
)
# The same action as each of REDIS by its words alone (it holds all of theirs).
BOTH_SIDES = "a Redis cache in front of the session store lookups"


@pytest.fixture
def operator(client, db):
    user = get_user_model().objects.create_superuser("operator", "op@example.com", "pw")
    client.force_login(user)
    return client


def actions(owner: TenantFixture, **params: object) -> dict:
    response = owner.api.get("/experiences/actions", {"user_id": "ada", **params})
    assert response.status_code == 200, response.json()
    return response.json()


def recommend(owner: TenantFixture) -> dict:
    response = owner.api.get("/experiences/recommend", {"user_id": "ada", "task": TASK})
    assert response.status_code == 200, response.json()
    return response.json()


def outcomes(action: str, spelled: str) -> list[dict]:
    names = {"s": "success", "f": "failure", "p": "partial"}
    return [{"task": TASK, "action": action, "outcome": names[o]} for o in spelled]


def phrase(action: str) -> ActionPhrase:
    return ActionPhrase.objects.get(key=action_key(action))


def bound(successes: float, failures: float) -> float:
    return round(float(lower_bounds([successes], [failures])[0]), 4)


def test_the_user_s_groups_are_listed_with_phrasings_and_counts_newest_first(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    record_many(org, [*outcomes(REDIS[0], "sf"), *outcomes(REDIS[1], "p")])
    record_many(org, outcomes("increase the batch size", "ss"))
    record_many(other_org, outcomes("rotate the TLS certificates", "s"))

    body = actions(org)
    assert body["next_cursor"] is None
    batch, redis = body["results"]
    assert [p["text"] for p in batch["phrasings"]] == ["increase the batch size"]
    assert batch["outcomes"] == {"success": 2, "failure": 0, "partial": 0}
    assert {p["text"]: p["experiences"] for p in redis["phrasings"]} == {REDIS[0]: 2, REDIS[1]: 1}
    assert redis["outcomes"] == {"success": 1, "failure": 1, "partial": 1}
    assert redis["client_id"] == org.client.pk
    # Bob's "ada" sees only hers.
    [bobs] = actions(other_org)["results"]
    assert [p["text"] for p in bobs["phrasings"]] == ["rotate the TLS certificates"]

    first = actions(org, limit=1)
    assert [group["id"] for group in first["results"]] == [batch["id"]]
    second = actions(org, limit=1, cursor=first["next_cursor"])
    assert [group["id"] for group in second["results"]] == [redis["id"]]
    assert second["next_cursor"] is None

    # One query for the page, however many groups and phrasings it holds.
    with CaptureQueriesContext(connection) as one:
        actions(org, limit=1)
    with CaptureQueriesContext(connection) as both:
        actions(org, limit=2)
    assert len(one) == len(both)


def test_a_bad_cursor_is_refused_clearly(org: TenantFixture) -> None:
    record_many(org, outcomes("increase the batch size", "s"))
    response = org.api.get("/experiences/actions", {"user_id": "ada", "cursor": "soon"})
    assert response.status_code == 422
    assert set(response.json()["fields"]) == {"cursor"}


def merge(operator, phrases: list[ActionPhrase], into: ActionPhrase):
    selected = {"action": "merge_groups", "_selected_action": [p.pk for p in phrases]}
    return operator.post(
        "/admin/skills/actionphrase/", {**selected, "confirm": "yes", "into": into.pk}
    )


def test_an_operator_merges_two_groups_and_recommend_pools_them(
    operator, org: TenantFixture
) -> None:
    redis, memcached = "add a redis cache", "add a memcached cache"
    record_many(org, [*outcomes(redis, "ssf"), *outcomes(memcached, "s")])
    before = recommend(org)
    assert before["counts"]["total"] == 3 and before["runners_up"][0]["counts"]["total"] == 1

    selected = {
        "action": "merge_groups",
        "_selected_action": [phrase(redis).pk, phrase(memcached).pk],
    }
    confirm = operator.post("/admin/skills/actionphrase/", selected)
    assert confirm.status_code == 200  # the confirmation, naming both groups
    assert memcached in confirm.content.decode() and redis in confirm.content.decode()
    assert len({p.group_key for p in ActionPhrase.objects.all()}) == 2

    done = merge(operator, [phrase(redis), phrase(memcached)], into=phrase(redis))
    assert done.status_code == 302
    after = recommend(org)
    assert after["counts"] == {"success": 3, "failure": 1, "partial": 0, "total": 4}
    assert after["confidence"] == bound(3, 1) and after["runners_up"] == []
    [change] = history_of(phrase(memcached))
    assert change["actor"] == "operator" and change["operator"] == "operator"
    assert change["changes"]["group_key"] == {
        "before": action_key(memcached),
        "after": action_key(redis),
    }
    [group] = actions(org)["results"]
    assert group["outcomes"] == {"success": 3, "failure": 1, "partial": 0}

    # A later recording of either stays merged.
    record_many(org, outcomes(memcached, "s"))
    assert recommend(org)["counts"]["total"] == 5


@pytest.mark.parametrize("which", ["the group's key", "another phrasing"])
def test_an_operator_splits_a_phrasing_out_and_it_stays_apart(
    operator, org: TenantFixture, which: str
) -> None:
    record_many(org, [*outcomes(REDIS[0], "s"), *outcomes(REDIS[1], "s"), *outcomes(REDIS[2], "s")])
    assert recommend(org)["counts"]["success"] == 3
    grouped = list(ActionPhrase.objects.order_by("created_at", "id"))
    assert len({p.group_key for p in grouped}) == 1
    keyed = next(p for p in grouped if p.key == p.group_key)
    split = keyed if which == "the group's key" else next(p for p in grouped if p != keyed)
    stayed = [p for p in grouped if p != split]

    url = f"/admin/skills/actionphrase/{split.pk}/split/"
    assert url in operator.get(f"/admin/skills/actionphrase/{split.pk}/change/").content.decode()
    confirm = operator.get(url)
    assert confirm.status_code == 200
    assert all(p.text in confirm.content.decode() for p in stayed)
    assert len({p.group_key for p in ActionPhrase.objects.all()}) == 1  # nothing yet

    assert operator.post(url).status_code == 302
    body = recommend(org)
    assert body["counts"]["success"] == 2 and body["confidence"] == bound(2, 0)
    assert [r["counts"]["success"] for r in body["runners_up"]] == [1]
    # The moved side's history names the operator: the split phrasing, or the rest re-keyed.
    moved = split if which == "another phrasing" else stayed[0]
    moved.refresh_from_db()
    [change] = history_of(moved)
    assert change["operator"] == "operator" and "group_key" in change["changes"]

    # A new recording of the split phrasing stays in its own group...
    record_many(org, outcomes(split.text, "s"))
    listed = {
        frozenset(p["text"] for p in group["phrasings"]): group["outcomes"]["success"]
        for group in actions(org)["results"]
    }
    assert listed == {frozenset([split.text]): 2, frozenset(p.text for p in stayed): 2}
    # ...and a phrasing the same action as both sides joins neither.
    record_many(org, outcomes(BOTH_SIDES, "s"))
    assert phrase(BOTH_SIDES).group_key not in {
        p.group_key for p in ActionPhrase.objects.exclude(key=action_key(BOTH_SIDES))
    }
    assert len(actions(org)["results"]) == 3


def test_a_merge_undoes_a_split(operator, org: TenantFixture) -> None:
    record_many(org, [*outcomes(REDIS[0], "s"), *outcomes(REDIS[2], "s")])
    assert (
        operator.post(f"/admin/skills/actionphrase/{phrase(REDIS[2]).pk}/split/").status_code == 302
    )
    assert phrase(REDIS[2]).apart_from == [action_key(REDIS[0])]
    merge(operator, [phrase(REDIS[0]), phrase(REDIS[2])], into=phrase(REDIS[0]))
    assert phrase(REDIS[2]).apart_from == [] and phrase(REDIS[0]).apart_from == []
    record_many(org, outcomes(BOTH_SIDES, "s"))
    assert recommend(org)["counts"]["success"] == 3


def test_a_phrasing_alone_in_its_group_is_not_split(operator, org: TenantFixture) -> None:
    record_many(org, outcomes("increase the batch size", "s"))
    alone = ActionPhrase.objects.get()
    answer = operator.post(f"/admin/skills/actionphrase/{alone.pk}/split/", follow=True)
    assert "alone in its group" in answer.content.decode()
    assert not alone.history.exists()
