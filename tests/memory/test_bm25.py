"""BM25 as the server computes it, checked against Okapi BM25 computed here in plain Python
over the same lexemes (PostgreSQL's to_tsvector)."""

from __future__ import annotations

import math
import random

import pytest
from django.db import connection

from accounts.selectors import end_user_get
from accounts.services import client_read_scopes_set, end_user_create_or_get
from accounts.tenancy import Scope
from memory.extractors import Proposal
from memory.services import memories_store
from memory.services.records import Owner
from memory.types import MEMORY_TYPES
from mirix_site.search import bm25
from mirix_site.search.bm25 import bm25_search
from tests.factories import TenantFixture

SEMANTIC = MEMORY_TYPES["semantic"].kind

K1, B = 1.2, 0.75
WORDS = (
    "apple", "banana", "cherry", "river", "mountain", "forest", "ocean", "desert", "city",
    "village", "market", "school", "doctor", "teacher", "engineer", "garden", "kitchen",
    "travel", "music", "guitar", "piano", "painting", "dinner", "breakfast", "meeting",
    "project", "deadline", "budget", "report", "coffee", "tea", "hiking", "running", "swimming",
)  # fmt: skip


def store(owner: TenantFixture, user_id: str, texts: list[str]) -> None:
    user, _ = end_user_create_or_get(tenant=owner.tenant, user_id=user_id, name=None)
    memories_store(
        owner=Owner(owner.organization.pk, owner.client.pk, user.pk),
        proposals=[
            Proposal("semantic", {"name": f"fact {index}", "summary": text}, [index])
            for index, text in enumerate(texts)
        ],
        embedders=[],
        enabled_types={"semantic"},
    )


def tsvector(text: str) -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT lexeme, array_length(positions, 1) FROM unnest(to_tsvector('english', %s))",
            [text],
        )
        return dict(cursor.fetchall())


def python_bm25(documents: dict[int, str], query: str) -> list[tuple[int, float]]:
    vectors = {doc_id: tsvector(text) for doc_id, text in documents.items()}
    vectors = {doc_id: vector for doc_id, vector in vectors.items() if vector}
    lengths = {doc_id: sum(vector.values()) for doc_id, vector in vectors.items()}
    n = len(vectors)
    average = sum(lengths.values()) / n
    scores: dict[int, float] = {}
    for term in set(tsvector(query)):
        df = sum(1 for vector in vectors.values() if term in vector)
        if not df:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for doc_id, vector in vectors.items():
            tf = vector.get(term, 0)
            if tf:
                weight = tf * (K1 + 1) / (tf + K1 * (1 - B + B * lengths[doc_id] / average))
                scores[doc_id] = scores.get(doc_id, 0.0) + idf * weight
    return sorted(scores.items(), key=lambda item: (-item[1], -item[0]))


def memory_texts(owner: TenantFixture, user_id: str, clients: list | None = None) -> dict[int, str]:
    """The indexed text of the user's semantic memories (of these clients, default: owner's)."""
    from memory.models import SemanticMemory

    user = end_user_get(tenant=owner.tenant, user_id=user_id)
    rows = SemanticMemory.objects.filter(end_user=user, client__in=clients or [owner.client])
    return {row.pk: f"{row.name}\n{row.summary}" for row in rows}


def test_scores_and_order_match_okapi_bm25(org: TenantFixture) -> None:
    store(
        org,
        "sam",
        [
            "Sam went hiking in the mountains with his sister",
            "The mountain trail was steep; hiking took hours",
            "Sam prefers tea to coffee in the morning",
            "Budget meeting moved to Friday; bring the quarterly report",
            "Sam's sister is a doctor in the city hospital",
            "Hiking boots, hiking poles and a map of the mountain",
        ],
    )
    response = org.api.get(
        "/memory/search",
        {
            "user_id": "sam",
            "query": "hiking mountain sister",
            "search_method": "bm25",
            "memory_type": "semantic",
        },
    )
    assert response.status_code == 200
    served = [(int(result["id"]), result["bm25_score"]) for result in response.json()["results"]]
    expected = python_bm25(memory_texts(org, "sam"), "hiking mountain sister")
    assert [doc for doc, _ in served] == [doc for doc, _ in expected][: len(served)]
    for (_, got), (_, want) in zip(served, expected, strict=False):
        assert got == pytest.approx(want, abs=1e-6)
    assert len(served) == len(expected) == 4


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(
    ("single_statement_postings", "probe_fraction"),
    [
        (10**9, bm25.PROBE_FRACTION),  # one statement scores every posting
        # Term by term: every pruned term's postings read whole; looked up by id; either, by df.
        (0, 0.0),
        (0, 1.0),
        (0, bm25.PROBE_FRACTION),
    ],
)
def test_pruned_top_k_equals_exhaustive_scoring(
    org: TenantFixture,
    seed: int,
    single_statement_postings: int,
    probe_fraction: float,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bm25, "SINGLE_STATEMENT_POSTINGS", single_statement_postings)
    monkeypatch.setattr(bm25, "PROBE_FRACTION", probe_fraction)
    generator = random.Random(seed)
    texts = [" ".join(generator.choices(WORDS, k=generator.randint(3, 25))) for _ in range(400)]
    store(org, "big", texts)
    documents = memory_texts(org, "big")
    user = end_user_get(tenant=org.tenant, user_id="big")
    scope = Scope(org.organization.pk, (org.client.pk,), user.pk)
    for _ in range(5):
        query = " ".join(generator.choices(WORDS, k=generator.randint(1, 6)))
        served = bm25_search(scope=scope, kind=SEMANTIC, query=query, limit=10)
        expected = python_bm25(documents, query)[:10]
        assert [score for _, score in served] == pytest.approx(
            [score for _, score in expected], abs=1e-6
        )
        # Equal scores are ordered by id on both sides.
        assert [doc for doc, _ in served] == [doc for doc, _ in expected]
        # A filter keeps the statistics of the whole scope and drops the others' scores.
        allowed = set(generator.sample(sorted(documents), 150))
        served = bm25_search(scope=scope, kind=SEMANTIC, query=query, limit=10, allowed_ids=allowed)
        expected = [item for item in python_bm25(documents, query) if item[0] in allowed][:10]
        assert served == [(doc, pytest.approx(score, abs=1e-6)) for doc, score in expected]


def test_statistics_cover_only_what_the_caller_may_read(org: TenantFixture) -> None:
    sibling = org.another_client("sibling")
    store(org, "sam", ["tea in the morning", "coffee at night"])
    store(sibling, "sam", ["tea tea tea ceremony", "green tea", "tea garden"])
    user = end_user_get(tenant=org.tenant, user_id="sam")
    own = bm25_search(
        scope=Scope(org.organization.pk, (org.client.pk,), user.pk),
        kind=SEMANTIC,
        query="tea",
        limit=10,
    )
    [(own_id, own_score)] = own
    [(expected_id, expected_score)] = python_bm25(memory_texts(org, "sam"), "tea")
    assert own_id == expected_id
    assert own_score == pytest.approx(expected_score, abs=1e-6)

    client_read_scopes_set(client=org.client, scopes=[sibling.client])
    both = bm25_search(
        scope=Scope(org.organization.pk, (org.client.pk, sibling.client.pk), user.pk),
        kind=SEMANTIC,
        query="tea",
        limit=10,
    )
    expected = python_bm25(memory_texts(org, "sam", clients=[org.client, sibling.client]), "tea")
    assert [doc for doc, _ in both] == [doc for doc, _ in expected]
    assert [score for _, score in both] == pytest.approx([score for _, score in expected], abs=1e-6)
    assert len(both) == 4


def test_deleting_and_editing_keep_the_index_exact(org: TenantFixture) -> None:
    store(org, "sam", ["tea garden", "tea house", "coffee shop", "green tea leaves"])
    documents = memory_texts(org, "sam")
    tea_house = next(doc for doc, text in documents.items() if "house" in text)
    coffee = next(doc for doc, text in documents.items() if "coffee" in text)
    assert org.api.delete(f"/memory/semantic/{tea_house}").status_code == 200
    org.api.patch(f"/memory/semantic/{coffee}", {"summary": "tea and coffee shop"}, format="json")
    documents = memory_texts(org, "sam")
    served = org.api.get(
        "/memory/search",
        {"user_id": "sam", "query": "tea", "search_method": "bm25", "memory_type": "semantic"},
    ).json()["results"]
    expected = python_bm25(documents, "tea")
    assert [int(r["id"]) for r in served] == [doc for doc, _ in expected]
    assert [r["bm25_score"] for r in served] == pytest.approx([s for _, s in expected], abs=1e-6)


def _statistics(user_pk: int) -> tuple[set[tuple], set[tuple]]:
    from mirix_site.search.models import DocumentStats, TermStats

    terms = TermStats.objects.filter(end_user_id=user_pk).values_list(
        "organization_id", "client_id", "kind", "lexeme", "doc_frequency", "max_tf"
    )
    documents = DocumentStats.objects.filter(end_user_id=user_pk).values_list(
        "organization_id", "client_id", "kind", "doc_count", "total_length"
    )
    return set(terms), set(documents)


def test_statistics_counted_from_the_postings_are_those_each_write_kept(
    org: TenantFixture,
) -> None:
    """A bulk load writes postings alone and counts the statistics once at its end
    (bench.memories_load): the count must be what the writes' own upserts give."""
    from mirix_site.search.index import statistics_recount

    store(org, "sam", ["tea garden tea", "tea house", "coffee shop", "green tea leaves"])
    store(org, "sam", ["tea tea tea ceremony", "the", "coffee beans and tea"])  # "the": no lexeme
    store(org.another_client("sibling"), "sam", ["coffee coffee", "garden"])
    user = end_user_get(tenant=org.tenant, user_id="sam")
    kept = _statistics(user.pk)
    assert len(kept[1]) == 2 and len(kept[0]) > 8  # both clients, many lexemes

    statistics_recount(kind=SEMANTIC, end_user_ids=[user.pk])

    assert _statistics(user.pk) == kept
