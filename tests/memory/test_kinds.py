"""The retrieval engine serves any registered kind: the test app's notes (``tests.notes``), a kind
the engine has never heard of, get BM25, vectors, the gate, the retrieval log and per-user
indexes. And the registry refuses kinds that would mix their rows in the index."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection

from accounts.models import EndUser
from accounts.services import end_user_create_or_get
from accounts.tenancy import Scope
from memory.types import MEMORY_TYPES
from mirix_site.search import vectors
from mirix_site.search.checks import kind_codes_check, searchable_kinds_check
from mirix_site.search.engine import SearchRequest
from mirix_site.search.index import documents_unindex
from mirix_site.search.kinds import SearchableKind, kind_get, kind_register, kind_unregister
from mirix_site.search.models import GateCalibration, Posting, RetrievalLog, SearchableKindCode
from mirix_site.search.services import retrieval_search
from mirix_site.search.vector_indexes import index_exists, vector_indexes_sync
from tests.factories import TenantFixture
from tests.notes.factories import WRITTEN, notes_create
from tests.notes.models import NOTE_KIND, Note, NoteEmbedding

MODEL = "all-MiniLM-L6-v2"
NOTES = [
    ("Kayak trip", "Packed the red kayak for the lake on Saturday"),
    ("Tea", "Green tea in the morning, never coffee"),
    ("Dentist", "The dentist moved the appointment to Thursday"),
    ("Guitar", "New strings before the concert"),
]


def _search(owner: TenantFixture, user: EndUser | None, query: str, **options: Any):
    return retrieval_search(
        tenant=owner.tenant,
        end_user=user,
        endpoint="notes/search",
        request=SearchRequest(kinds=(NOTE_KIND,), query=query, **options),
    )


def _titles(outcome) -> list[str]:
    return [hit.row.title for hit in outcome.hits]


def test_a_kind_registered_by_another_app_is_searched_by_every_lane(org: TenantFixture) -> None:
    assert kind_get("note") is NOTE_KIND
    sam, _ = end_user_create_or_get(tenant=org.tenant, user_id="sam", name=None)
    notes_create(org, sam, NOTES)
    assert Posting.objects.filter(kind=NOTE_KIND.code, end_user=sam).exists()
    assert NoteEmbedding.objects.filter(end_user=sam, model=MODEL).count() == len(NOTES)

    for method in ("bm25", "embedding", "hybrid"):
        outcome = _search(org, sam, "kayak lake", method=method, limit=2)
        assert _titles(outcome)[0] == "Kayak trip", method
        assert all(hit.kind is NOTE_KIND for hit in outcome.hits)
    by_meaning = _search(org, sam, "which hot drink do I like", method="embedding", limit=1)
    assert _titles(by_meaning) == ["Tea"]  # no shared keyword: the vector lane found it
    bm25_only = _search(org, sam, "which hot drink do I like", method="bm25")
    assert "Tea" not in _titles(bm25_only)


def test_a_kinds_own_rules_current_time_and_tags_filter_its_rows(org: TenantFixture) -> None:
    sam, _ = end_user_create_or_get(tenant=org.tenant, user_id="sam", name=None)
    [kept] = notes_create(org, sam, [("Kayak trip", "the red kayak")], tags={"trip": "lake"})
    [archived] = notes_create(
        org, sam, [("Old kayak", "the blue kayak")], written_at=WRITTEN - timedelta(days=30)
    )
    assert set(_titles(_search(org, sam, "kayak"))) == {"Kayak trip", "Old kayak"}
    Note.objects.filter(pk=archived.pk).update(archived=True)
    assert _titles(_search(org, sam, "kayak")) == ["Kayak trip"]  # not current: not found
    Note.objects.filter(pk=archived.pk).update(archived=False)

    dated = _search(org, sam, "kayak", start=WRITTEN - timedelta(days=1))
    assert _titles(dated) == ["Kayak trip"]
    tagged = _search(org, sam, "kayak", filter_tags={"trip": "lake"})
    assert [hit.row.pk for hit in tagged.hits] == [kept.pk]
    documents_unindex(kind=NOTE_KIND, document_ids=[kept.pk])
    assert _titles(_search(org, sam, "kayak", method="bm25")) == ["Old kayak"]


def test_another_tenant_never_sees_a_kinds_rows(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    sam, _ = end_user_create_or_get(tenant=org.tenant, user_id="sam", name=None)
    notes_create(org, sam, NOTES)
    bob_sam, _ = end_user_create_or_get(tenant=other_org.tenant, user_id="sam", name=None)
    for method in ("bm25", "embedding", "hybrid"):
        assert _search(other_org, bob_sam, "kayak lake", method=method).hits == []
        assert _search(other_org, None, "kayak lake", method=method).hits == []
    sibling = org.another_client("notes-sibling")
    assert _search(sibling, sam, "kayak lake").hits == []  # no read scope on org's client
    with pytest.raises(ValueError, match="not of"):
        Scope.readable_by(other_org.tenant, end_user=sam)


def test_a_kinds_gate_thresholds_and_retrieval_log(org: TenantFixture) -> None:
    sam, _ = end_user_create_or_get(tenant=org.tenant, user_id="sam", name=None)
    notes_create(org, sam, NOTES)
    # The model's own, in place of the fresh install's.
    GateCalibration.objects.update_or_create(
        model=MODEL, kind="", defaults={"min_similarity": 0.1, "strong_similarity": 0.99}
    )
    # The kind's own calibration wins over the model's: here nothing passes it but BM25's top 3.
    GateCalibration.objects.create(
        model=MODEL, kind="note", min_similarity=0.999, strong_similarity=1.0
    )
    outcome = _search(org, sam, "kayak lake", method="hybrid")
    assert outcome.gate_thresholds["note"].min_similarity == 0.999
    assert {hit.candidate.gate for hit in outcome.hits} == {"kept_bm25_top3"}
    both = retrieval_search(
        tenant=org.tenant,
        end_user=sam,
        endpoint="both/search",
        request=SearchRequest(kinds=(MEMORY_TYPES["episodic"].kind, NOTE_KIND), query="kayak"),
    )
    assert both.gate_thresholds["episodic"].min_similarity == 0.1  # the model's
    assert both.gate_thresholds["note"].min_similarity == 0.999  # the kind's own

    log = RetrievalLog.objects.filter(endpoint="notes/search").order_by("id").first()
    assert log.kinds == ["note"]
    assert log.end_user_id == sam.pk
    assert log.query == "kayak lake"
    assert [entry["kind"] for entry in log.results] == ["note"] * len(outcome.hits)
    assert [entry["id"] for entry in log.results] == [hit.row.pk for hit in outcome.hits]
    assert log.gate["thresholds"]["note"]["min_similarity"] == 0.999


def test_a_large_user_of_a_kind_gets_an_index_of_their_own(
    org: TenantFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vectors, "EXACT_SCAN_MAX_ROWS", 20)
    sam, _ = end_user_create_or_get(tenant=org.tenant, user_id="sam", name=None)
    ana, _ = end_user_create_or_get(tenant=org.tenant, user_id="ana", name=None)
    notes_create(org, sam, [(f"Trip {n}", f"kayak trip number {n} on the lake") for n in range(30)])
    notes_create(org, ana, NOTES)
    own = vectors.own_index_name(NOTE_KIND, MODEL, sam.pk)
    with connection.cursor() as cursor:
        # The test's transaction holds deferred foreign-key checks; an index build waits for none.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")

    outcome = vector_indexes_sync()

    assert outcome.built == [own]
    assert index_exists(own)
    assert vectors._path(Scope.readable_by(org.tenant, end_user=sam), NOTE_KIND, MODEL) == "own"
    assert vectors._path(Scope.readable_by(org.tenant, end_user=ana), NOTE_KIND, MODEL) == "exact"
    found = _search(org, sam, "kayak trip on the lake", method="embedding", limit=5)
    assert len(found.hits) == 5
    assert all(hit.row.end_user_id == sam.pk for hit in found.hits)


def _clashing(code: int, name: str = "clash") -> SearchableKind:
    return SearchableKind(name, code, Note, NoteEmbedding, ("title",), tags_field="tags")


def test_the_system_check_refuses_a_kind_code_taken_by_another_kind(db: None) -> None:
    assert searchable_kinds_check() == []
    episodic_code = MEMORY_TYPES["episodic"].kind.code
    clash = _clashing(episodic_code)
    kind_register(clash)
    try:
        errors = searchable_kinds_check()
        assert [error.id for error in errors] == ["retrieval.E001"]
        assert "episodic, clash" in errors[0].msg
        with pytest.raises(SystemCheckError, match=r"retrieval\.E001"):
            call_command("check")
    finally:
        kind_unregister(clash)
    assert searchable_kinds_check() == []


def test_the_system_check_refuses_a_name_twice_and_a_bad_declaration(db: None) -> None:
    twice = _clashing(902, name="note")
    broken = SearchableKind("broken", 903, Note, NoteEmbedding, ("title", "subtitle"))
    unfused = SearchableKind("unfused", 904, Note, NoteEmbedding, ("title",), fusion="max")
    for kind in (twice, broken, unfused):
        kind_register(kind)
    try:
        errors = searchable_kinds_check()
        assert {error.id for error in errors} == {
            "retrieval.E002",
            "retrieval.E003",
            "retrieval.E004",
        }
        assert any("fusion is one of scores, rrf" in error.msg for error in errors)
        assert all(isinstance(error, checks.Error) for error in errors)
    finally:
        for kind in (twice, broken, unfused):
            kind_unregister(kind)


def test_a_code_once_given_to_a_kind_is_refused_to_another(db: None) -> None:
    # Migrating recorded the code of every registered kind.
    assert SearchableKindCode.objects.get(code=NOTE_KIND.code).name == "note"
    assert SearchableKindCode.objects.get(code=MEMORY_TYPES["episodic"].kind.code).name == (
        "episodic"
    )
    assert kind_codes_check(databases=["default"]) == []
    # A kind since removed, whose postings may still be in the index.
    SearchableKindCode.objects.create(code=950, name="retired")
    newcomer = _clashing(950, name="newcomer")
    kind_register(newcomer)
    try:
        [error] = kind_codes_check(databases=["default"])
        assert error.id == "retrieval.E006"
        assert "'retired'" in error.msg
        with pytest.raises(SystemCheckError, match=r"retrieval\.E006"):
            call_command("check", "--database", "default")
    finally:
        kind_unregister(newcomer)


def test_a_kind_that_writes_its_own_vectors_is_handed_its_rows(org: TenantFixture) -> None:
    import dataclasses

    from mirix_site.providers.embeddings import embedding_provider_from_settings
    from mirix_site.search.index import embeddings_write

    sam, _ = end_user_create_or_get(tenant=org.tenant, user_id="sam", name=None)
    first, second = notes_create(org, sam, NOTES[:2])
    handed: list[tuple[list[int], str]] = []
    own = dataclasses.replace(
        NOTE_KIND,
        vectors_write=lambda rows, embedder: handed.append(
            ([row.pk for row in rows], embedder.model_name)
        ),
    )
    before = {
        note.pk: set(NoteEmbedding.objects.filter(note=note).values_list("pk", flat=True))
        for note in (first, second)
    }
    embedder = embedding_provider_from_settings()
    embeddings_write(documents=[(own, first), (NOTE_KIND, second)], embedders=[embedder])
    assert handed == [([first.pk], embedder.model_name)]
    after = {
        note.pk: set(NoteEmbedding.objects.filter(note=note).values_list("pk", flat=True))
        for note in (first, second)
    }
    # The kind's own rows are left to it; the other kind's chunks are embedded again.
    assert after[first.pk] == before[first.pk]
    assert after[second.pk] and not after[second.pk] & before[second.pk]
