"""Recall and recommend quality of experiences through the API of a running server, on a
labelled set, as its dev and test halves.

The default set is the project's (``tests/skills/data/experience_eval.json``, written by hand
for this project without running the system; see its "about"): seeds (task, action, outcome,
age), recall cases (a query and every seed that answers it) and recommend cases (a task and
the seeds whose action is right). Its problems are split by their label's prefix, sorted: the
even ones are the dev half, where a rule or weight is chosen, the odd ones the test half, which
is reported. ``--dataset tests/skills/data/mimir_eval.json`` runs Mimir's own set (one half).

Each run records the seeds as a new user in one batch, waits until the worker has embedded
them (``embedding_pending`` 0), then asks every case once; ``--at-once`` asks every case right
after recording too, before waiting (with no worker running then, every row is unembedded: what
an agent gets while the worker is behind). Figures per half:
- recall@k: of the seeds that answer a case, the share in the first k results (over as many as
  could fit in k), averaged over cases; MRR: 1 / the rank of the first one;
- recommend: the share of cases whose recommended action is one of the right seeds' actions;
  a case with ``half_life_days`` asks with it.

Usage (a server started with the settings under test, e.g. ``make run``):
    .venv/bin/python -m bench.experience_quality [--base-url URL] [--api-key KEY]
        [--dataset FILE] [--k 5] [--at-once] [--json-out FILE] [--smoke]
``--smoke``: three problems' seeds and cases: checks that the bench runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from bench.common import (
    PROJECT_DIR,
    BenchError,
    KeepAliveClient,
    api_key_read,
    arguments_parse,
    server_arguments,
)

DEFAULT_DATASET = PROJECT_DIR / "tests" / "skills" / "data" / "experience_eval.json"
EMBED_TIMEOUT_SECONDS = 600.0
SMOKE_PROBLEMS = 3


def _problem(label: str) -> str:
    return label.split("-", maxsplit=1)[0]


def halves(data: dict[str, Any]) -> dict[str, set[str]]:
    """The problems of each half: sorted prefixes, even ones dev, odd ones test. A set whose
    recommend cases name actions, not seeds (Mimir's), is one half: "all"."""
    problems = sorted({_problem(seed["label"]) for seed in data["seeds"]})
    if any("expected_action_labels" not in case for case in data["recommend_cases"]):
        return {"all": set(problems)}
    return {"dev": set(problems[0::2]), "test": set(problems[1::2])}


def _half_of(labels: Sequence[str], parts: dict[str, set[str]]) -> str | None:
    problems = {_problem(label) for label in labels}
    return next((name for name, members in parts.items() if problems <= members), None)


def _seed(client: KeepAliveClient, user_id: str, seeds: Sequence[dict[str, Any]]) -> dict[str, str]:
    now = datetime.now(UTC)
    items = []
    for seed in seeds:
        item = {key: seed[key] for key in ("task", "action", "outcome")}
        if seed.get("days_ago"):
            item["occurred_at"] = (now - timedelta(days=seed["days_ago"])).isoformat()
        items.append(item)
    body = json.dumps({"user_id": user_id, "experiences": items}).encode()
    status, payload = client.request("POST", "/experiences", body)
    if status != 201:
        raise BenchError(f"recording the seeds: {status} {payload}")
    made = payload["experiences"]  # type: ignore[index]
    return {row["id"]: seed["label"] for row, seed in zip(made, seeds, strict=True)}


def _wait_embedded(client: KeepAliveClient, user_id: str) -> float:
    began = time.monotonic()
    while True:
        status, payload = client.request("GET", f"/experiences/stats?user_id={user_id}")
        if status != 200:
            raise BenchError(f"stats: {status} {payload}")
        if payload["embedding_pending"] == 0:  # type: ignore[index]
            return time.monotonic() - began
        if time.monotonic() - began > EMBED_TIMEOUT_SECONDS:
            raise BenchError("the worker did not embed the seeds in time: is it running?")
        time.sleep(0.5)


def _get(client: KeepAliveClient, path: str, params: dict[str, Any]) -> dict[str, Any]:
    status, payload = client.request("GET", f"{path}?{urlencode(params)}")
    if status != 200:
        raise BenchError(f"{path}: {status} {payload}")
    return payload  # type: ignore[return-value]


def _ask(
    client: KeepAliveClient,
    data: dict[str, Any],
    *,
    user_id: str,
    k: int,
    labels: dict[str, str],
    embed_seconds: float | None,
) -> dict[str, dict[str, Any]]:
    """Every case asked once, scored per half."""
    parts = halves(data)
    by_label = {seed["label"]: seed for seed in data["seeds"]}
    figures: dict[str, dict[str, Any]] = {
        name: {"recall": [], "reciprocal_ranks": [], "recommended": [], "misses": []}
        for name in parts
    }
    for case in data["recall_cases"]:
        half = _half_of(case["relevant"], parts)
        if half is None:
            continue
        found = [
            labels.get(row["id"], "?")
            for row in _get(
                client,
                "/experiences/recall",
                {"user_id": user_id, "query": case["query"], "k": k},
            )["results"]
        ]
        relevant = set(case["relevant"])
        hits = len(relevant.intersection(found[:k]))
        figures[half]["recall"].append(hits / min(len(relevant), k))
        first = next((rank for rank, label in enumerate(found, 1) if label in relevant), None)
        figures[half]["reciprocal_ranks"].append(1 / first if first else 0.0)
    for case in data["recommend_cases"]:
        expected_labels = case.get("expected_action_labels")
        if expected_labels is None:  # Mimir's set names the action itself
            expected = {case["expected_action"]}
            half = next(iter(parts))
        else:
            expected = {by_label[label]["action"] for label in expected_labels}
            half = _half_of(expected_labels, parts)
        if half is None:
            continue
        params: dict[str, Any] = {"user_id": user_id, "task": case["task"]}
        if case.get("half_life_days"):
            params["half_life_days"] = case["half_life_days"]
        action = _get(client, "/experiences/recommend", params).get("action")
        figures[half]["recommended"].append(action in expected)
        if action not in expected:
            figures[half]["misses"].append(f"{case['task']!r}: {action!r}")
    return {
        name: {
            "recall_cases": len(half["recall"]),
            f"recall@{k}": round(sum(half["recall"]) / max(len(half["recall"]), 1), 4),
            "mrr": round(sum(half["reciprocal_ranks"]) / max(len(half["reciprocal_ranks"]), 1), 4),
            "recommend_cases": len(half["recommended"]),
            "recommend_accuracy": round(
                sum(half["recommended"]) / max(len(half["recommended"]), 1), 4
            ),
            "recommend_misses": half["misses"],
            "embed_seconds": None if embed_seconds is None else round(embed_seconds, 1),
        }
        for name, half in figures.items()
    }


def measure(
    client: KeepAliveClient, data: dict[str, Any], *, user_id: str, k: int, at_once: bool = False
) -> dict[str, dict[str, dict[str, Any]]]:
    """The figures per phase ("at once": asked right after recording, when asked for;
    "embedded": once the worker has embedded every seed), each per half."""
    labels = _seed(client, user_id, data["seeds"])
    phases = {}
    if at_once:
        phases["at once"] = _ask(
            client, data, user_id=user_id, k=k, labels=labels, embed_seconds=None
        )
        print("experience_quality: asked at once; waiting for the worker", file=sys.stderr)
    embed_seconds = _wait_embedded(client, user_id)
    phases["embedded"] = _ask(
        client, data, user_id=user_id, k=k, labels=labels, embed_seconds=embed_seconds
    )
    return phases


def _smoke_subset(data: dict[str, Any]) -> dict[str, Any]:
    problems = sorted({_problem(seed["label"]) for seed in data["seeds"]})[:SMOKE_PROBLEMS]

    def kept(labels: Sequence[str]) -> bool:
        return {_problem(label) for label in labels} <= set(problems)

    return {
        "seeds": [seed for seed in data["seeds"] if _problem(seed["label"]) in problems],
        "recall_cases": [case for case in data["recall_cases"] if kept(case["relevant"])],
        "recommend_cases": [
            case
            for case in data["recommend_cases"]
            if kept(case.get("expected_action_labels") or [problems[0]])
        ],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    server_arguments(parser)
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument(
        "--at-once",
        action="store_true",
        help="ask every case right after recording too, before waiting for the worker",
    )
    parser.add_argument("--json-out", type=Path, default=None)
    arguments = arguments_parse(parser, argv, smoke={})
    try:
        data = json.loads(arguments.dataset.read_text())
        if arguments.smoke:
            data = _smoke_subset(data)
        client = KeepAliveClient(arguments.base_url, api_key_read(arguments))
        user_id = f"exq-{uuid.uuid4().hex[:10]}"
        phases = measure(client, data, user_id=user_id, k=arguments.k, at_once=arguments.at_once)
        client.request("DELETE", f"/users/{user_id}")
    except BenchError as error:
        print(f"experience_quality: {error}", file=sys.stderr)
        return 1
    print(f"{arguments.dataset.name}, user {user_id}, k={arguments.k}")
    for phase, results in phases.items():
        if len(phases) > 1:
            print(f" {phase}:")
        for name, half in results.items():
            print(
                f"  {name:5} recall@{arguments.k} {half[f'recall@{arguments.k}']:.3f} "
                f"MRR {half['mrr']:.3f} ({half['recall_cases']} cases); recommend "
                f"{half['recommend_accuracy']:.3f} ({half['recommend_cases']} cases)"
            )
            for miss in half["recommend_misses"]:
                print(f"        recommend missed {miss}")
    if arguments.json_out is not None:
        # Asked once, the halves' figures as before; asked at once too, per phase.
        written = phases if arguments.at_once else phases["embedded"]
        arguments.json_out.write_text(json.dumps(written, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
