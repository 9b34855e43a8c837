"""Recall and recommend quality through the API, on a fresh install's defaults (the similarity
gate calibrated for the bundled model): Mimir's own labelled set with Mimir's floors, and a
larger set written for this project (``data/experience_eval.json``, see its "about")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.factories import TenantFixture
from tests.skills.experiences import aged, record_many

DATA = Path(__file__).parent / "data"


def _load(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


def _seed(org: TenantFixture, seeds: list[dict[str, Any]], user_id: str) -> dict[str, str]:
    """Record the seeds (one batch) as the given user; their ids by label."""
    items = [
        {
            "task": seed["task"],
            "action": seed["action"],
            "outcome": seed["outcome"],
            **({"occurred_at": aged(seed["days_ago"])} if seed.get("days_ago") else {}),
        }
        for seed in seeds
    ]
    made = record_many(org, items, user_id=user_id)
    return {row["id"]: seed["label"] for row, seed in zip(made, seeds, strict=True)}


def _recall_figures(
    org: TenantFixture, cases: list[dict[str, Any]], labels: dict[str, str], user_id: str, k: int
) -> tuple[float, float, list[str]]:
    """Mean recall@k (the relevant found in the first k, over as many as could fit) and MRR,
    with the cases that missed."""
    recalls, reciprocal_ranks, misses = [], [], []
    for case in cases:
        response = org.api.get(
            "/experiences/recall", {"user_id": user_id, "query": case["query"], "k": k}
        )
        assert response.status_code == 200, response.json()
        found = [labels[row["id"]] for row in response.json()["results"]]
        relevant = set(case["relevant"])
        hits = len(relevant.intersection(found[:k]))
        recalls.append(hits / min(len(relevant), k))
        first = next((rank for rank, label in enumerate(found, 1) if label in relevant), None)
        reciprocal_ranks.append(1 / first if first else 0.0)
        if hits < min(len(relevant), k):
            misses.append(f"{case['query']!r}: {found} (want {sorted(relevant)})")
    return sum(recalls) / len(recalls), sum(reciprocal_ranks) / len(reciprocal_ranks), misses


def _recommend(org: TenantFixture, task: str, user_id: str, **params: object) -> dict[str, Any]:
    response = org.api.get("/experiences/recommend", {"user_id": user_id, "task": task, **params})
    assert response.status_code == 200, response.json()
    return response.json()


@pytest.mark.slow
def test_mimirs_quality_set_holds_mimirs_floors(org: TenantFixture) -> None:
    data = _load("mimir_eval.json")
    labels = _seed(org, data["seeds"], "mimir")
    recall_at_5, mrr, misses = _recall_figures(org, data["recall_cases"], labels, "mimir", 5)
    assert recall_at_5 >= 0.80, misses
    assert mrr >= 0.90, misses
    for case in data["recommend_cases"]:
        body = _recommend(org, case["task"], "mimir")
        assert body.get("action") == case["expected_action"], (case, body)
    decay_seeds = [
        {"label": f"decay-{i}", "outcome": "success", **seed}
        for i, seed in enumerate(data["decay_seeds"])
    ]
    _seed(org, decay_seeds, "mimir-decay")
    case = data["decay_case"]
    assert (
        _recommend(org, case["task"], "mimir-decay", half_life_days=30)["action"]
        == (case["recent_action"])
    )
    assert _recommend(org, case["task"], "mimir-decay")["action"] != case["recent_action"]


@pytest.fixture
def larger_set(org: TenantFixture) -> tuple[dict[str, Any], dict[str, str]]:
    data = _load("experience_eval.json")
    assert len(data["recall_cases"]) >= 40 and len(data["recommend_cases"]) >= 15
    return data, _seed(org, data["seeds"], "eval")


@pytest.mark.slow
def test_the_projects_larger_set_recalls(
    org: TenantFixture, larger_set: tuple[dict[str, Any], dict[str, str]]
) -> None:
    """0.881 at 5 and MRR 1.0 when measured (2026-12-01); 0.849 with the chat memories'
    vector weight (see EXPERIENCE_SEARCH_VECTOR_WEIGHT)."""
    data, labels = larger_set
    recall_at_5, mrr, misses = _recall_figures(org, data["recall_cases"], labels, "eval", 5)
    assert recall_at_5 >= 0.85, (recall_at_5, misses)
    assert mrr >= 0.9, (mrr, misses)


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="measured 2026-12-01, nothing tuned on it: 24 of 25. For flaky browser tests an iOS "
    "signing action (5 of 5) wins over explicit waits (3 of 3): their experiences are 0.30 "
    "cosine from the task alike; see issue [7/10]'s note",
)
def test_the_projects_larger_set_recommends(
    org: TenantFixture, larger_set: tuple[dict[str, Any], dict[str, str]]
) -> None:
    data, _ = larger_set
    by_label = {seed["label"]: seed for seed in data["seeds"]}
    wrong = []
    for case in data["recommend_cases"]:
        params = {"half_life_days": case["half_life_days"]} if case["half_life_days"] else {}
        body = _recommend(org, case["task"], "eval", **params)
        expected = {by_label[label]["action"] for label in case["expected_action_labels"]}
        if body.get("action") not in expected:
            wrong.append(f"{case['task']!r}: {body.get('action')!r} (want {sorted(expected)})")
    assert not wrong, wrong
