"""The search endpoints: fusion, gate, the similarity threshold, tenancy, the retrieval log."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone

from accounts.services import client_read_scopes_set, end_user_create_or_get
from memory.extractors import Proposal
from memory.services import memories_store
from memory.services.records import Owner
from memory.types import MEMORY_TYPES
from mirix_site.providers.embeddings import embedding_provider_from_settings
from mirix_site.search import engine
from mirix_site.search.fusion import Thresholds, gate_apply, rrf_fuse, scores_fuse
from mirix_site.search.log import retrieval_logs_purge
from mirix_site.search.models import GateCalibration, RetrievalLog
from mirix_site.search.vectors import vector_search
from tests.factories import TenantFixture, chat_turns

FACTS = [
    "Sam's sister Ana is a doctor at the city hospital",
    "The budget meeting moved to Friday afternoon",
    "Sam prefers green tea over coffee in the morning",
    "Our team hiked the ridge trail in the Alps last summer",
    "The guitar needs new strings before the concert",
    "Leo is allergic to peanuts and carries an epinephrine pen",
]


def store(owner: TenantFixture, user_id: str = "sam", facts: list[str] = FACTS) -> None:
    user, _ = end_user_create_or_get(tenant=owner.tenant, user_id=user_id, name=None)
    memories_store(
        owner=Owner(owner.organization.pk, owner.client.pk, user.pk),
        proposals=[
            Proposal("semantic", {"name": text.split()[0], "summary": text}, [index])
            for index, text in enumerate(facts)
        ],
        embedders=[embedding_provider_from_settings()],
        enabled_types={"semantic"},
    )


def search(owner: TenantFixture, **params: object) -> dict:
    params = {"user_id": "sam", "memory_type": "semantic", **params}
    response = owner.api.get("/memory/search", params)
    assert response.status_code == 200, response.json()
    return response.json()


def test_rrf_puts_an_item_both_lanes_found_above_either_lanes_top() -> None:
    fused = rrf_fuse([(1, 9.0), (2, 5.0), (3, 1.0)], [(4, 0.1), (2, 0.2), (5, 0.3)])
    assert [c.document_id for c in fused][:3] == [2, 4, 1]  # 1/62 + 1/61 beats 1/61
    both = fused[0]
    assert (both.bm25_rank, both.vector_rank) == (2, 2)
    assert both.score == pytest.approx(1 / 62 + 1 / 62)
    # BM25's hits the vector lane did not fetch get their similarity from ``distances``, for
    # the gate; the vector lane's own distance wins; ranks alone make the score.
    fused = rrf_fuse([(1, 9.0), (2, 5.0), (3, 1.0)], [(2, 0.2)], distances={1: 0.6, 2: 0.9})
    assert {c.document_id: c.similarity for c in fused} == pytest.approx({1: 0.4, 2: 0.8, 3: None})
    assert fused[0].score == pytest.approx(1 / 62 + 1 / 61)


def test_scores_fusion_keeps_bm25s_margins_and_reads_every_candidates_similarity() -> None:
    """BM25 scores over the best one's, plus the similarity times its weight: a BM25 hit far
    ahead stays ahead of a vector-lane top, and a BM25 hit the vector lane did not fetch still
    counts its similarity (from ``distances``)."""
    fused = scores_fuse(
        [(1, 10.0), (2, 5.0), (3, 4.0)],
        [(4, 0.2), (3, 0.3)],
        distances={1: 0.9, 2: 0.4},
        vector_weight=0.5,
    )
    scores = {c.document_id: c.score for c in fused}
    assert scores == pytest.approx({1: 1.05, 2: 0.8, 3: 0.75, 4: 0.4})
    assert [c.document_id for c in fused] == [1, 2, 3, 4]
    three = next(c for c in fused if c.document_id == 3)
    assert (three.bm25_rank, three.vector_rank, three.similarity) == (3, 2, pytest.approx(0.7))
    # Under RRF the vector lane's first would have beaten BM25's second.
    ranked = [
        c.document_id for c in rrf_fuse([(1, 10.0), (2, 5.0), (3, 4.0)], [(4, 0.2), (3, 0.3)])
    ]
    assert ranked.index(4) < ranked.index(2)


def test_scores_fusion_without_a_query_vector_is_bm25_and_the_time_lane() -> None:
    fused = scores_fuse([(1, 8.0), (2, 4.0)], [], distances={}, time=[(2, 2.0), (7, 1.0)])
    assert {c.document_id: c.score for c in fused} == pytest.approx({1: 1.0, 2: 1.5, 7: 0.5})
    assert [c.document_id for c in fused] == [2, 1, 7]
    assert all(c.similarity is None for c in fused)


def test_gate_drops_keeps_and_promotes() -> None:
    fused = rrf_fuse([(1, 9.0), (2, 8.0), (3, 7.0), (4, 6.0)], [(5, 0.05), (1, 0.7)])
    similarities = {1: 0.3, 2: 0.2, 3: 0.5, 4: 0.1, 5: 0.95}
    for candidate in fused:
        candidate.similarity = similarities[candidate.document_id]
    kept = gate_apply(fused, Thresholds(min_similarity=0.4, strong_similarity=0.9), fusion="rrf")
    decisions = {c.document_id: c.gate for c in fused}
    assert decisions == {
        5: "strong",  # ranks first however it fused
        1: "kept_bm25_top3",  # below min, rescued by its BM25 rank 1
        2: "kept_bm25_top3",
        3: "kept",
        4: "dropped",  # below min and BM25 rank 4
    }
    assert kept[0].document_id == 5
    assert 4 not in {c.document_id for c in kept}
    assert gate_apply(fused, None, fusion="rrf") == fused and {c.gate for c in fused} == {"off"}


def test_under_the_fusion_by_scores_a_result_near_bm25s_best_passes_the_gate() -> None:
    """Below the minimum similarity, BM25's top 3 pass, and past them whatever BM25 scored at
    least 0.7 of its best (rank 5 here, at 0.75): an answer spread over several memories of
    one subject keeps its keyword matches, however the model reads them."""
    bm25 = [(1, 10.0), (2, 9.0), (3, 8.0), (4, 7.5), (5, 7.0), (6, 6.9), (7, 2.0)]
    fused = scores_fuse(bm25, [], distances={i: 0.95 for i in range(1, 8)})
    thresholds = Thresholds(min_similarity=0.4, strong_similarity=0.9)
    kept = gate_apply(fused, thresholds, fusion="scores")
    assert {c.document_id: c.gate for c in fused} == {
        1: "kept_bm25_top3",
        2: "kept_bm25_top3",
        3: "kept_bm25_top3",
        4: "kept_bm25_score",  # 7.5 of 10
        5: "kept_bm25_score",  # 7.0 of 10: the floor is inclusive
        6: "dropped",  # 6.9 of 10
        7: "dropped",
    }
    assert [c.document_id for c in kept] == [1, 2, 3, 4, 5]
    # Fused by RRF (experiences, skills), rank alone rescues.
    gate_apply(fused, thresholds, fusion="rrf")
    assert {c.document_id for c in fused if c.gate != "dropped"} == {1, 2, 3}


@pytest.mark.parametrize("fusion", ["rrf", "scores"])
def test_rows_tied_with_bm25s_third_pass_the_gate_with_it(fusion: str) -> None:
    """Identical texts score alike: a cut after the third of five equal scores would keep two
    of them by their ids alone. Within the time named, the same."""
    bm25 = [(1, 9.0), (2, 5.0), (3, 5.0), (4, 5.0), (5, 5.0), (6, 4.9)]
    time = [(7, 3.0), (8, 2.0), (9, 1.0), (10, 1.0), (11, 0.5)]
    fused = (rrf_fuse if fusion == "rrf" else scores_fuse)(
        bm25, [], time=time, distances={i: 0.95 for i in range(1, 12)}
    )
    gate_apply(fused, Thresholds(min_similarity=0.4, strong_similarity=0.9), fusion=fusion)
    passed = {c.document_id for c in fused if c.gate == "kept_bm25_top3"}
    assert passed == {1, 2, 3, 4, 5, 7, 8, 9, 10}
    assert {c.document_id for c in fused if c.gate == "dropped"} == {6, 11}


def test_a_row_not_yet_embedded_is_judged_by_bm25_alone() -> None:
    """A row with no similarity (the worker has not embedded it) that a keyword lane found
    passes, however far down; one that was embedded and is not similar does not."""
    bm25 = [(1, 9.0), (2, 8.0), (3, 7.0), (4, 2.0), (5, 1.0)]
    fused = rrf_fuse(bm25, [(6, 0.2)], distances={1: 0.5, 2: 0.5, 3: 0.5, 4: 0.9})
    kept = gate_apply(fused, Thresholds(min_similarity=0.4, strong_similarity=0.9), fusion="rrf")
    assert {c.document_id: c.gate for c in fused} == {
        1: "kept",
        2: "kept",
        3: "kept",
        4: "dropped",  # embedded, similarity 0.1, BM25 rank 4
        5: "kept_unembedded",  # BM25 rank 5, no similarity yet
        6: "kept",
    }
    # Ranked by its keyword rank alone: after every row a lane ranked better.
    assert [c.document_id for c in kept][-1] == 5


def test_a_short_list_is_filled_from_what_a_keyword_lane_scored() -> None:
    """Asked for 5 with two kept, the dropped rows BM25 or the time lane scored follow them in
    fused order up to 5; the vector lane's own dropped rows (unrelated, by the calibration)
    never do, and without ``fill`` nothing is added."""
    bm25 = [(1, 9.0), (2, 3.0), (3, 2.5), (4, 2.0), (5, 1.5), (6, 1.0)]
    vector = [(7, 0.8), (8, 0.85)]
    thresholds = Thresholds(min_similarity=0.4, strong_similarity=0.9)
    similarities = {1: 0.5, 2: 0.1, 3: 0.1, 4: 0.1, 5: 0.1, 6: 0.1}

    def fused() -> list:
        return scores_fuse(
            bm25, vector, time=[(9, 1.0)], distances={k: 1 - v for k, v in similarities.items()}
        )

    candidates = fused()
    kept = gate_apply(candidates, thresholds, fusion="rrf")
    assert [c.document_id for c in kept] == [1, 9, 2, 3]
    candidates = fused()
    kept = gate_apply(candidates, thresholds, fusion="rrf", fill=6)
    assert [c.document_id for c in kept] == [1, 9, 2, 3, 4, 5]
    assert [c.gate for c in kept][-2:] == ["kept_fill", "kept_fill"]
    assert {c.document_id: c.gate for c in candidates if c.gate == "dropped"} == {
        6: "dropped",  # the list is full
        7: "dropped",  # the vector lane's alone, below the minimum
        8: "dropped",
    }
    candidates = fused()
    kept = gate_apply(candidates, thresholds, fusion="rrf", fill=20)
    assert [c.document_id for c in kept] == [1, 9, 2, 3, 4, 5, 6]
    # Enough kept already: the fill adds nothing.
    candidates = fused()
    assert len(gate_apply(candidates, thresholds, fusion="rrf", fill=3)) == 4
    assert "kept_fill" not in {c.gate for c in candidates}


def test_the_time_lane_adds_its_rank_and_its_top_three_pass_the_gate() -> None:
    """The time lane (the rows dated in a time the query names, ranked by BM25) is one more
    RRF list; a row in its top 3 is an exact keyword hit at the time asked, kept like BM25's."""
    fused = rrf_fuse(
        [(1, 9.0), (2, 8.0), (3, 7.0), (4, 6.0)], [], time=[(4, 2.0), (9, 1.0)], time_weight=1.0
    )
    assert [c.document_id for c in fused][:2] == [4, 1]  # 1/64 + 1/61 beats 1/61
    four = fused[0]
    assert (four.bm25_rank, four.time_rank) == (4, 1)
    assert four.score == pytest.approx(1 / 64 + 1 / 61)
    nine = next(c for c in fused if c.document_id == 9)
    assert (nine.bm25_rank, nine.time_rank) == (None, 2)  # found only in the time named
    for candidate in fused:
        candidate.similarity = 0.1
    gate_apply(fused, Thresholds(min_similarity=0.4, strong_similarity=0.9), fusion="rrf")
    assert {c.document_id: c.gate for c in fused} == {
        1: "kept_bm25_top3",
        2: "kept_bm25_top3",
        3: "kept_bm25_top3",
        4: "kept_bm25_top3",  # BM25 rank 4, but first in the time asked
        9: "kept_bm25_top3",
    }


def test_hybrid_search_answers_in_the_mirix_shape(org: TenantFixture) -> None:
    store(org)
    body = search(org, query="what does Sam drink in the morning")
    assert body["search_method"] == "hybrid"
    assert body["count"] == len(body["results"]) > 0
    top = body["results"][0]
    assert "tea" in top["summary"]
    response = org.api.get("/memory/search", {"user_id": "sam", "query": "green tea"})
    timings = dict(part.split(";dur=") for part in response["Server-Timing"].split(", "))
    assert set(timings) == {"embed", "search", "bm25", "vector"}
    assert float(timings["search"]) >= max(float(timings["bm25"]), float(timings["vector"]))
    # Asked again, the query's embedding is read from the cache, and the header says so.
    again = org.api.get("/memory/search", {"user_id": "sam", "query": "green tea"})
    assert again["Server-Timing"].startswith('embed;desc="cache";dur=')
    assert set(top) >= {
        "id",
        "memory_type",
        "score",
        "ranks",
        "similarity",
        "gate",
        "source_message_ids",
    }
    assert top["ranks"]["bm25"] is not None and top["ranks"]["embedding"] is not None


def test_a_memory_search_scores_bm25_over_its_best_plus_the_weighted_similarity(
    org: TenantFixture, settings, similarity_gate_off: None
) -> None:
    """The default fusion, seen in the answer: every result's score is its BM25 score over the
    search's best (0 where BM25 did not find it) plus 0.6 x its similarity; with
    SEARCH_FUSION=rrf, the sum of each lane's weight / (60 + rank). The gate is off so that
    the vector lane's own finds, which the calibrated gate rightly drops as unrelated here,
    show their scores too."""
    store(org)
    query = "Sam tea coffee morning doctor"
    results = search(org, query=query, limit=10)["results"]
    best = max(r["bm25_score"] for r in results if r["bm25_score"] is not None)
    found_by = {r["ranks"]["bm25"] is not None for r in results}
    assert found_by == {True, False}  # BM25's hits and the vector lane's alone
    for result in results:
        bm25 = result["bm25_score"] or 0.0
        assert result["score"] == pytest.approx(bm25 / best + 0.6 * result["similarity"])
    settings.SEARCH_FUSION = "rrf"
    results = search(org, query=query, limit=10)["results"]
    for result in results:
        ranks = result["ranks"]
        expected = sum(
            weight / (60 + rank)
            for weight, rank in ((1.0, ranks["bm25"]), (0.1, ranks["embedding"]))
            if rank is not None
        )
        assert result["score"] == pytest.approx(expected)


def test_uncalibrated_model_runs_with_the_gate_off(
    org: TenantFixture, similarity_gate_off: None
) -> None:
    store(org)
    body = search(org, query="peanut allergy")
    assert {result["gate"] for result in body["results"]} == {"off"}


def test_calibrated_gate_drops_and_promotes_through_the_api(org: TenantFixture) -> None:
    store(org)
    GateCalibration.objects.update_or_create(
        model="all-MiniLM-L6-v2",
        kind="",
        defaults={"min_similarity": 0.99, "strong_similarity": 1.5},
    )
    body = search(org, query="peanut allergy epinephrine", limit=10)
    # Nothing is similar enough: only BM25's top 3 survive, rescued by their keyword ranks,
    # and what BM25 scored at least 0.7 of its best.
    results = body["results"]
    best = max(r["bm25_score"] for r in results)
    assert {r["gate"] for r in results if r["ranks"]["bm25"] <= 3} == {"kept_bm25_top3"}
    for result in results:
        assert result["ranks"]["bm25"] <= 3 or (
            result["gate"] == "kept_bm25_score" and result["bm25_score"] >= 0.7 * best
        )
    GateCalibration.objects.filter(model="all-MiniLM-L6-v2", kind="").update(
        min_similarity=-1.0, strong_similarity=0.5
    )
    body = search(org, query="peanut allergy epinephrine", limit=10)
    assert body["results"][0]["gate"] == "strong"
    assert "peanuts" in body["results"][0]["summary"]


def test_a_memory_search_returns_the_limit_asked_while_bm25_holds_candidates(
    org: TenantFixture,
) -> None:
    """The gate judges everything unrelated: BM25's top 3 pass, and the rest of what BM25
    found fills the list to the limit asked (kept_fill, in order), not what only the vector
    lane found; a limit under what passed is still a cut."""
    store(org, facts=[f"{FACTS[0]} {'and Sam ' * index}" for index in range(6)] + FACTS[1:])
    GateCalibration.objects.update_or_create(
        model="all-MiniLM-L6-v2",
        kind="",
        defaults={"min_similarity": 0.99, "strong_similarity": 1.5},
    )
    query = "Sam sister Ana doctor"
    by_bm25 = search(org, query=query, limit=10, search_method="bm25")["results"]
    results = search(org, query=query, limit=10)["results"]
    assert len(by_bm25) == 7  # the six sisters and "Sam prefers green tea"
    assert {r["id"] for r in results} == {r["id"] for r in by_bm25}
    gates = [r["gate"] for r in results]
    assert gates[:3] == ["kept_bm25_top3"] * 3
    first_fill = gates.index("kept_fill")
    assert set(gates[3:first_fill]) <= {"kept_bm25_score"}
    assert set(gates[first_fill:]) == {"kept_fill"}
    assert len(search(org, query=query, limit=2)["results"]) == 2


def _cosine(left: list[float], right: list[float]) -> float:
    dot = sum(a * b for a, b in zip(left, right, strict=True))
    return dot / (sum(a * a for a in left) * sum(b * b for b in right)) ** 0.5


def test_call_calibrate_gate_stores_thresholds_that_split_related_from_unrelated(
    db, tmp_path
) -> None:
    pairs = [
        ("Where is my passport?", "Sam left the passport in the hallway desk drawer."),
        ("What is Ana's job?", "Ana works as a doctor at the city hospital."),
        ("When is the dentist?", "The dentist appointment moved to Thursday at 3 pm."),
        ("Which tea do I like?", "Sam prefers green tea over coffee in the morning."),
        ("What breed is the dog?", "Our dog Biscuit is a beagle who loves long walks."),
        ("Where did we hike?", "The team hiked the ridge trail in the Alps last summer."),
        ("What does the guitar need?", "The guitar needs new strings before the concert."),
        ("Who is allergic to peanuts?", "Leo is allergic to peanuts and carries an epipen."),
        ("What car do I drive?", "Sam drives a blue hatchback bought second-hand in May."),
        ("What is the wifi password?", "The office wifi password changed to lantern-42."),
    ]
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps({"related": pairs}))
    out = StringIO()
    call_command("calibrate_gate", pairs=path, stdout=out)

    calibration = GateCalibration.objects.get(model="all-MiniLM-L6-v2", kind="")
    embedder = embedding_provider_from_settings()
    questions = embedder.embed([question for question, _ in pairs])
    memories = embedder.embed([memory for _, memory in pairs])
    related = [_cosine(q, m) for q, m in zip(questions, memories, strict=True)]
    unrelated = [
        _cosine(q, m) for i, q in enumerate(questions) for j, m in enumerate(memories) if i != j
    ]
    kept_related = sum(s >= calibration.min_similarity - 1e-4 for s in related) / len(related)
    passed_unrelated = sum(s >= calibration.min_similarity + 1e-4 for s in unrelated)
    assert kept_related >= 0.9  # the 5th percentile of 10 pairs interpolates below the 2nd
    assert passed_unrelated <= 0.05 * len(unrelated) + 1
    assert calibration.strong_similarity > max(unrelated) - 1e-4
    assert calibration.min_similarity < calibration.strong_similarity <= 1
    assert (calibration.related_pairs, calibration.unrelated_pairs) == (10, 90)
    assert "min_similarity" in out.getvalue()


def test_similarity_threshold_applies_to_the_vector_lane_only(org: TenantFixture) -> None:
    store(org)
    query = {"query": "green tea", "similarity_threshold": 0.01}
    assert search(org, search_method="embedding", **query)["results"] == []
    assert search(org, search_method="bm25", **query)["results"]
    hybrid = search(org, search_method="hybrid", **query)["results"]
    assert hybrid and all(r["ranks"]["embedding"] is None for r in hybrid)
    assert search(org, search_method="embedding", query="green tea", similarity_threshold=1.9)[
        "results"
    ]


@pytest.mark.django_db(transaction=True)
def test_hybrid_runs_the_vector_lane_on_its_own_connection_with_the_same_answer(
    org: TenantFixture, settings, monkeypatch
) -> None:
    """Outside a transaction the vector lane runs in the lane pool beside BM25; the answer is
    the one the two lanes give in turn (SEARCH_LANE_THREADS=0, or inside a transaction)."""
    store(org)
    threads: list[str] = []

    def recorded(**kwargs: object) -> list[tuple[int, float]]:
        threads.append(threading.current_thread().name)
        return vector_search(**kwargs)

    monkeypatch.setattr(engine, "vector_search", recorded)
    query = {"query": "what does Sam drink in the morning"}

    beside = search(org, **query)["results"]
    settings.SEARCH_LANE_THREADS = 0
    in_turn = search(org, **query)["results"]
    settings.SEARCH_LANE_THREADS = 2
    with transaction.atomic():
        in_transaction = search(org, **query)["results"]

    assert threads[0].startswith("search-lane")
    assert not threads[1].startswith("search-lane") and not threads[2].startswith("search-lane")
    assert beside and "tea" in beside[0]["summary"]
    answers = [
        [(r["id"], r["ranks"], r["gate"]) for r in results]
        for results in (beside, in_turn, in_transaction)
    ]
    assert answers[0] == answers[1] == answers[2]


def test_other_tenants_and_clients_memories_never_appear(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    store(org, facts=["Sam owns a red kayak"])
    store(other_org, facts=["Sam owns a blue kayak"])
    sibling = org.another_client("sibling")
    store(sibling, facts=["Sam owns a green kayak"])
    for method in ("bm25", "embedding", "hybrid"):
        summaries = {
            r["summary"] for r in search(org, query="kayak", search_method=method)["results"]
        }
        assert summaries == {"Sam owns a red kayak"}, method
        across = org.api.get(
            "/memory/search_all_users", {"query": "kayak", "search_method": method}
        ).json()
        assert {r["summary"] for r in across["results"]} == {"Sam owns a red kayak"}
    client_read_scopes_set(client=org.client, scopes=[sibling.client])
    summaries = {r["summary"] for r in search(org, query="kayak")["results"]}
    assert summaries == {"Sam owns a red kayak", "Sam owns a green kayak"}
    assert (
        other_org.api.get("/memory/search", {"user_id": "nobody", "query": "x"}).status_code == 404
    )


def test_filter_tags_and_dates(org: TenantFixture) -> None:
    for project, when in (("apollo", "2025-01-10T10:00:00Z"), ("gemini", "2025-03-10T10:00:00Z")):
        org.api.post(
            "/memory/add",
            {
                "user_id": "sam",
                "messages": chat_turns(f"Launch review for {project} went well", "ok"),
                "filter_tags": {"project": project},
                "occurred_at": when,
            },
            format="json",
        )
    from memory.models import ExtractionJob
    from memory.services import extraction_job_run

    for job in ExtractionJob.objects.filter(status="queued"):
        extraction_job_run(organization_id=job.organization_id, job_id=job.pk)
    tagged = search(
        org, memory_type="episodic", query="launch review", filter_tags='{"project": "gemini"}'
    )
    assert [r["filter_tags"]["project"] for r in tagged["results"]] == ["gemini"]
    dated = search(
        org,
        memory_type="episodic",
        query="launch review",
        start_date="2025-01-01T00:00:00Z",
        end_date="2025-01-31T23:59:59Z",
    )
    assert [r["filter_tags"]["project"] for r in dated["results"]] == ["apollo"]
    assert dated["date_range"]["start"].startswith("2025-01-01")

    def projects(**params: object) -> tuple[list[str], dict | None, dict | None, str | None]:
        body = search(org, memory_type="episodic", **params)
        found = [r["filter_tags"]["project"] for r in body["results"]]
        return found, body["date_range"], body["temporal_range"], body["temporal_expression"]

    spoken = {"query": "the launch review in March", "as_of": "2025-06-01T09:00:00Z"}
    # temporal=false: the phrase is only words.
    assert projects(**spoken, temporal="false")[2:] == (None, None)
    assert sorted(projects(**spoken, temporal="false")[0]) == ["apollo", "gemini"]
    # The time the words name is favoured, not a filter: March's launch first, January's after;
    # read by default, as the published MIRIX client (which has no such parameter) searches.
    found, date_range, temporal_range, expression = projects(**spoken)
    assert (found, date_range, expression) == (["gemini", "apollo"], None, "March")
    assert projects(**spoken, temporal="true") == (found, date_range, temporal_range, expression)
    assert temporal_range == {
        "start": "2025-03-01T00:00:00+00:00",
        "end": "2025-03-31T23:59:59.999999+00:00",
    }
    body = search(org, memory_type="episodic", **spoken, temporal="true")
    assert [r["ranks"]["time"] for r in body["results"]] == [1, None]
    for method in ("bm25", "embedding"):
        found, *_ = projects(**spoken, temporal="true", search_method=method)
        assert found == ["gemini", "apollo"], method
    # Explicit dates filter, the phrase still orders what they let through.
    found, date_range, temporal_range, _ = projects(
        **spoken, temporal="true", end_date="2025-02-28T00:00:00Z"
    )
    assert found == ["apollo"]
    assert date_range == {"start": None, "end": "2025-02-28T00:00:00+00:00"}
    assert temporal_range["start"] == "2025-03-01T00:00:00+00:00"
    # Read from today (2026 or later), "in March" is a March without these launches: nothing
    # is dated in it, and both are found by their words.
    found, _, temporal_range, _ = projects(query="the launch review in March", temporal="true")
    assert sorted(found) == ["apollo", "gemini"] and temporal_range is not None
    assert projects(query="the launch review", temporal="true")[1:] == (None, None, None)


def test_an_event_told_after_the_time_it_happened_is_found_by_that_time(
    org: TenantFixture,
) -> None:
    """ "Which museums did I visit in February?", asked of talks on 3 March about February: the
    phrase names when the visits were, not when they were told. A filter on the talks' date
    hid every answer; as a preference the talk is found, and one dated in February comes
    first."""
    for text, when in (
        ("Last month I visited the Louvre museum and the Orsay", "2023-03-03T11:00:00Z"),
        ("I visited the science museum with my niece", "2023-02-11T10:00:00Z"),
        ("The museum gift shop had lovely postcards", "2023-01-05T10:00:00Z"),
    ):
        org.api.post(
            "/memory/add",
            {"user_id": "sam", "messages": chat_turns(text, "nice"), "occurred_at": when},
            format="json",
        )
    from memory.models import ExtractionJob
    from memory.services import extraction_job_run

    for job in ExtractionJob.objects.filter(status="queued"):
        extraction_job_run(organization_id=job.organization_id, job_id=job.pk)
    body = search(
        org,
        memory_type="episodic",
        query="Which museums did I visit in February?",
        temporal="true",
        as_of="2023-03-04T09:00:00Z",
    )
    assert body["temporal_expression"] == "February"
    summaries = [r["summary"] for r in body["results"]]
    assert summaries[0] == "user: I visited the science museum with my niece"
    assert "user: Last month I visited the Louvre museum and the Orsay" in summaries


def test_results_carry_each_memory_as_the_memory_endpoints_do(org: TenantFixture) -> None:
    """Search reads its rows in SQL of its own: each result's memory fields are those the
    ORM-loaded memory serializes to (tags, provenance, times, user id, a masked secret)."""
    from memory.api.serializers.memories import MemorySerializer
    from memory.models import ExtractionJob
    from memory.services import extraction_job_run

    for user_id in ("sam", "ana"):
        response = org.api.post(
            "/memory/add",
            {
                "user_id": user_id,
                "messages": chat_turns(
                    "The launch review is in review.pdf and my wifi password is hunter22", "ok"
                ),
                "filter_tags": {"project": "apollo", "rank": 2},
                "occurred_at": "2025-01-10T10:00:00Z",
            },
            format="json",
        )
        assert response.status_code == 202, response.json()
    for job in ExtractionJob.objects.filter(status="queued"):
        extraction_job_run(organization_id=job.organization_id, job_id=job.pk)
    answers = [
        org.api.get("/memory/search", {"user_id": "sam", "query": "launch review password"}),
        org.api.get("/memory/search_all_users", {"query": "launch review password"}),
    ]
    kinds_seen, users_seen = set(), set()
    for response in answers:
        assert response.status_code == 200, response.json()
        for result in response.json()["results"]:
            kind = MEMORY_TYPES[result["memory_type"]]
            row = kind.model.objects.get(pk=result["id"])
            expected = MemorySerializer(row, context={"memory_type": kind}).data
            assert {key: result[key] for key in expected} == expected
            kinds_seen.add(kind.name)
            users_seen.add(result["user_id"])
    assert {"episodic", "resource", "knowledge_vault"} <= kinds_seen
    assert users_seen == {"sam", "ana"}


@pytest.mark.parametrize(
    "params",
    [
        {"query": "x", "search_method": "telepathy"},
        {"query": "x", "memory_type": "dreams"},
        {"query": "x", "limit": 0},
        {"query": "x", "filter_tags": "{not json"},
        {"query": "x", "filter_tags": "[1, 2]"},
        {"query": "x", "filter_tags": json.dumps({"note": "x" * 9000})},
        {"query": "x", "similarity_threshold": 3},
        {"query": "x", "memory_type": "semantic", "search_field": "nonsense"},
        {"query": "x", "start_date": "2025-02-01T00:00:00Z", "end_date": "2025-01-01T00:00:00Z"},
    ],
)
def test_bad_search_parameters_are_422(org: TenantFixture, params: dict) -> None:
    org.api.post("/users/create_or_get", {"user_id": "sam"}, format="json")
    response = org.api.get("/memory/search", {"user_id": "sam", **params})
    assert response.status_code == 422, response.json()


def test_search_field_narrows_the_keyword_lane(org: TenantFixture) -> None:
    user, _ = end_user_create_or_get(tenant=org.tenant, user_id="sam", name=None)
    memories_store(
        owner=Owner(org.organization.pk, org.client.pk, user.pk),
        proposals=[
            Proposal("semantic", {"name": "Drinks", "summary": "green tea in the morning"}, [1]),
            Proposal("semantic", {"name": "Tea ceremony", "summary": "a Kyoto visit"}, [2]),
        ],
        embedders=[],
        enabled_types={"semantic"},
    )
    names = search(org, query="tea", search_method="bm25", search_field="name")["results"]
    summaries = search(org, query="tea", search_method="bm25", search_field="summary")["results"]
    assert [r["name"] for r in names] == ["Tea ceremony"]
    assert [r["name"] for r in summaries] == ["Drinks"]


def test_every_retrieval_writes_one_log_row(org: TenantFixture, settings) -> None:
    store(org)
    calls = [
        lambda: org.api.get("/memory/search", {"user_id": "sam", "query": "tea"}),
        lambda: org.api.get("/memory/search_all_users", {"query": "tea"}),
        lambda: org.api.get("/memory/retrieve/topic", {"user_id": "sam", "topic": "tea"}),
        lambda: org.api.post(
            "/memory/retrieve/conversation",
            {"user_id": "sam", "messages": chat_turns("what do I drink?")},
            format="json",
        ),
    ]
    for call in calls:
        before = RetrievalLog.objects.count()
        assert call().status_code == 200
        assert RetrievalLog.objects.count() == before + 1
    row = RetrievalLog.objects.filter(endpoint="memory/search").get()
    assert row.client == org.client and row.end_user.user_id == "sam"
    assert row.results and {"id", "bm25_rank", "vector_rank", "score", "gate"} <= set(
        row.results[0]
    )
    assert row.latency_ms > 0
    settings.RETRIEVAL_LOG_ENABLED = False
    before = RetrievalLog.objects.count()
    for call in calls:
        call()
    assert RetrievalLog.objects.count() == before


def test_the_log_row_is_written_after_the_answer_is_sent(org: TenantFixture) -> None:
    from django.core import signals
    from django.core.handlers.wsgi import WSGIHandler
    from django.db import close_old_connections
    from django.test.client import FakePayload

    store(org)
    before = RetrievalLog.objects.count()
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/memory/search",
        "QUERY_STRING": "user_id=sam&query=tea",
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_X_API_KEY": org.key,
        "wsgi.url_scheme": "http",
        "wsgi.input": FakePayload(b""),
        "wsgi.errors": StringIO(),
    }
    started: list[str] = []
    # As the test client does, the request's signals keep the test's connection (and its
    # transaction) open.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        # As a WSGI server does: the answer's body is read (and sent) first, then closed.
        response = WSGIHandler()(environ, lambda status, headers: started.append(status))
        body = b"".join(response)
        assert started == ["200 OK"] and json.loads(body)["results"]
        assert RetrievalLog.objects.count() == before
        response.close()
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)
    row = RetrievalLog.objects.get(endpoint="memory/search", query="tea")
    assert row.end_user.user_id == "sam" and row.results


def test_purge_removes_only_old_log_rows(org: TenantFixture) -> None:
    store(org)
    for _ in range(3):
        org.api.get("/memory/search", {"user_id": "sam", "query": "tea"})
    old = RetrievalLog.objects.order_by("id")[:2]
    RetrievalLog.objects.filter(pk__in=[row.pk for row in old]).update(
        created_at=timezone.now() - timedelta(days=31)
    )
    out = StringIO()
    call_command("purge_retrieval_logs", "--dry-run", stdout=out)
    assert out.getvalue() == (
        "Dry run: 2 retrieval-log rows older than 30 days would be deleted. Nothing was changed.\n"
    )
    assert RetrievalLog.objects.count() == 3
    assert retrieval_logs_purge() == 2
    assert RetrievalLog.objects.count() == 1
    out = StringIO()
    call_command("purge_retrieval_logs", "--older-than-days", "0", stdout=out)
    assert out.getvalue().splitlines() == [
        "  1 deleted",
        "Deleted 1 retrieval-log rows older than 0 days.",
    ]
    assert not RetrievalLog.objects.exists()


def test_conversation_retrieval_finds_topics_and_dates(org: TenantFixture) -> None:
    from memory.models import ExtractionJob
    from memory.services import extraction_job_run

    now = timezone.now()
    for text, when in (
        ("We talked about the kayak trip to the fjord", now - timedelta(days=1)),
        ("We talked about the kayak repair shop", now - timedelta(days=40)),
    ):
        org.api.post(
            "/memory/add",
            {
                "user_id": "sam",
                "messages": chat_turns(text, "noted"),
                "occurred_at": when.isoformat(),
            },
            format="json",
        )
    for job in ExtractionJob.objects.filter(status="queued"):
        extraction_job_run(organization_id=job.organization_id, job_id=job.pk)
    store(org, facts=["Sam owns a red kayak"])
    response = org.api.post(
        "/memory/retrieve/conversation",
        {"user_id": "sam", "messages": chat_turns("What did we say about the kayak yesterday?")},
        format="json",
    )
    assert response.status_code == 200
    body = response.json()
    assert "kayak" in body["topic_list"] and "kayak" in body["topics"]
    assert body["temporal_expression"] == "yesterday"
    assert body["date_range"] is None  # no start_date / end_date: nothing filtered
    assert body["temporal_range"]["start"] and body["temporal_range"]["end"]
    episodes = [m["summary"] for m in body["memories"]["episodic"]["relevant"]]
    assert episodes == [
        "user: We talked about the kayak trip to the fjord",
        "user: We talked about the kayak repair shop",
    ]
    # Asked as of 39 days ago, "yesterday" is the day of the older talk.
    response = org.api.post(
        "/memory/retrieve/conversation",
        {
            "user_id": "sam",
            "messages": chat_turns("What did we say about the kayak yesterday?"),
            "as_of": (now - timedelta(days=39)).isoformat(),
        },
        format="json",
    )
    episodes = [m["summary"] for m in response.json()["memories"]["episodic"]["relevant"]]
    assert episodes == [
        "user: We talked about the kayak repair shop",
        "user: We talked about the kayak trip to the fjord",
    ]
    assert [m["summary"] for m in body["memories"]["semantic"]["items"]] == ["Sam owns a red kayak"]


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [{"role": "user", "content": ""}],
        [
            {"role": "user", "content": [{"type": "text", "text": "   "}]},
            {"role": "assistant", "content": ""},
        ],
    ],
)
def test_a_conversation_without_text_or_image_is_422(org: TenantFixture, messages: list) -> None:
    org.api.post("/users/create_or_get", {"user_id": "sam"}, format="json")
    response = org.api.post(
        "/memory/retrieve/conversation", {"user_id": "sam", "messages": messages}, format="json"
    )
    assert response.status_code == 422
    assert "messages" in response.json()["fields"]


def test_a_conversation_turn_with_an_unknown_role_is_422_naming_it(org: TenantFixture) -> None:
    org.api.post("/users/create_or_get", {"user_id": "sam"}, format="json")
    response = org.api.post(
        "/memory/retrieve/conversation",
        {"user_id": "sam", "messages": [{"role": "user", "content": "hi"}, {"role": "robot"}]},
        format="json",
    )
    assert response.status_code == 422
    assert "messages.1.role" in response.json()["fields"]


def test_a_conversation_date_range_ending_before_it_starts_is_422(org: TenantFixture) -> None:
    org.api.post("/users/create_or_get", {"user_id": "sam"}, format="json")
    response = org.api.post(
        "/memory/retrieve/conversation",
        {
            "user_id": "sam",
            "messages": [{"role": "user", "content": "what did I do?"}],
            "start_date": "2025-02-01T00:00:00Z",
            "end_date": "2025-01-01T00:00:00Z",
        },
        format="json",
    )
    assert response.status_code == 422
    assert "end_date" in response.json()["fields"]


def test_core_memory_is_returned_whole(org: TenantFixture) -> None:
    from tests.factories import memories_create

    memories_create(org, user_id="sam")
    body = org.api.get(
        "/memory/retrieve/topic", {"user_id": "sam", "topic": "unrelated words"}
    ).json()
    assert [block["label"] for block in body["memories"]["core"]["items"]] == ["human"]
    assert body["memories"]["core"]["items"][0]["value"] == "Sam likes tea."
