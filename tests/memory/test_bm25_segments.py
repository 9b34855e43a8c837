"""Posting segments (mirix_site.search.segments): a large owner's postings packed per lexeme
and scored from there must rank and score exactly as Okapi BM25 over the rows as they are now,
after the adds, edits and deletions made since the segments were built."""

from __future__ import annotations

import random
import threading
import time

import pytest
from django.db import connection, transaction

from accounts.selectors import end_user_get
from accounts.services import client_read_scopes_set
from accounts.tenancy import Scope
from memory.models import SemanticMemory
from mirix_site.search import segments
from mirix_site.search.bm25 import bm25_search
from mirix_site.search.index import index_clear
from mirix_site.search.models import Posting, PostingSegment, SegmentChange, SegmentCover
from mirix_site.search.segments import segments_build, segments_sync
from tests.factories import TenantFixture, tenant_fixture
from tests.memory.test_bm25 import SEMANTIC, WORDS, memory_texts, python_bm25, store


@pytest.fixture
def segmented(settings, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Segments for owners of 100 documents; the number of searches the segments served (each
    of a covered user's, however few postings its terms have)."""
    settings.BM25_SEGMENT_MIN_DOCUMENTS = 100
    served = [0]
    scored = segments.scored

    def counted(*args: object, **kwargs: object) -> list[tuple[int, float]]:
        served[0] += 1
        return scored(*args, **kwargs)

    monkeypatch.setattr(segments, "scored", counted)
    return served


def texts(generator: random.Random, count: int) -> list[str]:
    return [" ".join(generator.choices(WORDS, k=generator.randint(3, 25))) for _ in range(count)]


def assert_exact(scope: Scope, documents: dict[int, str], generator: random.Random) -> None:
    for _ in range(6):
        query = " ".join(generator.choices(WORDS, k=generator.randint(1, 6)))
        served = bm25_search(scope=scope, kind=SEMANTIC, query=query, limit=10)
        expected = python_bm25(documents, query)[:10]
        assert [doc for doc, _ in served] == [doc for doc, _ in expected]  # ties: newer first
        assert [score for _, score in served] == pytest.approx(
            [score for _, score in expected], abs=1e-6
        )
        allowed = set(generator.sample(sorted(documents), len(documents) // 3))
        served = bm25_search(scope=scope, kind=SEMANTIC, query=query, limit=10, allowed_ids=allowed)
        expected = [item for item in python_bm25(documents, query) if item[0] in allowed][:10]
        assert served == [(doc, pytest.approx(score, abs=1e-6)) for doc, score in expected]


@pytest.mark.parametrize("seed", [1, 2])
def test_segments_score_as_okapi_bm25(
    org: TenantFixture, segmented: list[int], seed: int, django_assert_num_queries
) -> None:
    generator = random.Random(seed)
    store(org, "big", texts(generator, 300))
    store(org, "small", texts(generator, 40))  # below the line: no segments
    outcome = segments_sync()
    assert len(outcome.built) == 1
    user = end_user_get(tenant=org.tenant, user_id="big")
    cover = SegmentCover.objects.get(end_user=user)
    assert cover.ready and cover.documents == 300
    assert cover.through_document_id == SemanticMemory.objects.filter(end_user=user).latest("pk").pk
    # One row per lexeme of the owner's postings, holding every posting.
    postings = Posting.objects.filter(end_user=user, kind=SEMANTIC.code)
    segments = PostingSegment.objects.filter(end_user=user)
    assert segments.count() == postings.values("lexeme").distinct().count()
    assert sum(len(row.document_ids) for row in segments) == 8 * postings.count()

    assert_exact(
        Scope(org.organization.pk, (org.client.pk,), user.pk), memory_texts(org, "big"), generator
    )
    assert segmented[0] == 12
    assert segments_sync().built == []  # nothing changed: nothing to build again

    # A user of fewer documents than an owner keeps segments from: no look for them.
    small = end_user_get(tenant=org.tenant, user_id="small")
    with django_assert_num_queries(2):  # the statistics, then the postings in one statement
        found = bm25_search(
            scope=Scope(org.organization.pk, (org.client.pk,), small.pk),
            kind=SEMANTIC,
            query=" ".join(WORDS[:4]),
            limit=10,
        )
    assert found and segmented[0] == 12


def test_segments_stay_exact_after_adds_edits_and_deletions(
    org: TenantFixture, segmented: list[int]
) -> None:
    generator = random.Random(7)
    store(org, "big", texts(generator, 300))
    segments_sync()
    user = end_user_get(tenant=org.tenant, user_id="big")
    old = sorted(memory_texts(org, "big"))
    deleted, edited = old[3], old[10]
    assert org.api.delete(f"/memory/semantic/{deleted}").status_code == 200
    response = org.api.patch(
        f"/memory/semantic/{edited}", {"summary": "coffee coffee coffee tea"}, format="json"
    )
    assert response.status_code == 200
    store(org, "big", texts(generator, 20))  # above the line: read from the postings

    changed = set(SegmentChange.objects.filter(end_user=user).values_list("document_id", flat=True))
    assert changed == {deleted, edited}
    documents = memory_texts(org, "big")
    assert deleted not in documents and "coffee coffee coffee" in documents[edited]
    assert_exact(Scope(org.organization.pk, (org.client.pk,), user.pk), documents, generator)
    assert segmented[0] == 12

    # 2 changed and 19 more (net) of 300: not yet a tenth. Ten more pass it: built again.
    assert segments_sync().built == []
    store(org, "big", texts(generator, 10))
    assert len(segments_sync().built) == 1
    cover = SegmentCover.objects.get(end_user=user)
    assert cover.documents == 329 and not SegmentChange.objects.filter(end_user=user).exists()
    assert_exact(
        Scope(org.organization.pk, (org.client.pk,), user.pk), memory_texts(org, "big"), generator
    )


def test_a_user_written_by_two_clients_is_scored_over_both(
    org: TenantFixture, segmented: list[int]
) -> None:
    generator = random.Random(3)
    sibling = org.another_client("sibling")
    store(org, "big", texts(generator, 200))
    store(sibling, "big", texts(generator, 30))  # its own owner, below the line
    segments_sync()
    client_read_scopes_set(client=org.client, scopes=[sibling.client])
    user = end_user_get(tenant=org.tenant, user_id="big")
    assert SegmentCover.objects.filter(end_user=user).count() == 1
    documents = memory_texts(org, "big", clients=[org.client, sibling.client])
    assert_exact(
        Scope(org.organization.pk, (org.client.pk, sibling.client.pk), user.pk),
        documents,
        generator,
    )
    assert segmented[0] == 12


def test_clearing_a_users_index_drops_their_segments_and_a_shrunk_owner_loses_them(
    org: TenantFixture, segmented: list[int], settings
) -> None:
    generator = random.Random(5)
    store(org, "big", texts(generator, 150))
    store(org, "other", texts(generator, 150))
    segments_sync()
    big = end_user_get(tenant=org.tenant, user_id="big")
    other = end_user_get(tenant=org.tenant, user_id="other")
    index_clear(kinds=[SEMANTIC], end_user=big, client=org.client)
    assert not PostingSegment.objects.filter(end_user=big).exists()
    assert not SegmentCover.objects.filter(end_user=big).exists()

    settings.BM25_SEGMENT_MIN_DOCUMENTS = 400  # "other" now below half the line
    outcome = segments_sync()
    assert outcome.dropped == [f"semantic {other.pk}/{org.client.pk}"]
    assert not PostingSegment.objects.filter(end_user=other).exists()


@pytest.mark.django_db(transaction=True)
def test_a_build_waits_for_postings_written_before_its_line_and_misses_none(
    settings,
) -> None:
    """A memory whose transaction began before the build drew its line, below that line,
    committed while the build runs: neither above the line nor listed as changed, so only
    the build's wait for the writers puts it in the segments."""
    settings.BM25_SEGMENT_MIN_DOCUMENTS = 100
    owner = tenant_fixture("alice")
    store(owner, "big", texts(random.Random(11), 150))
    written, release = threading.Event(), threading.Event()

    def writer() -> None:
        try:
            with transaction.atomic():
                store(owner, "big", ["zebra zebra quokka"])
                written.set()
                release.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=writer)
    thread.start()
    assert written.wait(30)
    # A later row of the owner, committed first, puts the line above the zebra (not indexed:
    # its postings would wait on the statistics rows the writer holds).
    user = end_user_get(tenant=owner.tenant, user_id="big")
    later = SemanticMemory.objects.filter(end_user=user).earliest("pk")
    later.pk, later.name, later.fingerprint = None, "a later row", "later"
    later.save()
    threading.Timer(1.0, release.set).start()
    began = time.monotonic()
    cover = segments_build(SEMANTIC, owner.organization.pk, owner.client.pk, user.pk)
    assert time.monotonic() - began >= 0.9  # it waited for the writer
    thread.join(30)

    zebra = SemanticMemory.objects.get(end_user=user, summary="zebra zebra quokka")
    assert zebra.pk < cover.through_document_id and cover.ready
    assert not SegmentChange.objects.filter(end_user=user).exists()
    served = bm25_search(
        scope=Scope(owner.organization.pk, (owner.client.pk,), user.pk),
        kind=SEMANTIC,
        query="zebra",
        limit=10,
    )
    assert [doc for doc, _ in served] == [zebra.pk]
