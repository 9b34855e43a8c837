"""Auto-dream of every memory type (``POST /memory/auto_dream``): the same fact or event said
again becomes one memory citing all the turns, the others superseded by it (kept, marked);
opposite facts stay apart; a dry run reports the same and changes nothing; a second run changes
nothing; every change is authored ``auto_dream``, and an operator restores a merged memory."""

from __future__ import annotations

import importlib
from datetime import timedelta

import numpy as np
import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from accounts.selectors import end_user_get
from accounts.services import end_user_create_or_get
from memory import consolidation
from memory.consolidation import (
    MERGE_SIMILARITY,
    Candidate,
    duplicates_group,
    text_normalise,
    texts_opposed,
)
from memory.extractors import Proposal
from memory.models import (
    CoreMemoryBlock,
    DreamRun,
    EpisodicMemory,
    ExtractionJob,
    KnowledgeVaultItem,
    ResourceMemory,
    SemanticEmbedding,
    SemanticMemory,
)
from memory.services import extraction_job_run, memories_store
from memory.services.dreams import dreams_due_queue, memory_restore
from memory.services.records import Owner
from memory.tasks import dream_run_task
from memory.types import MEMORY_TYPES
from mirix_site.common.history import history_of
from mirix_site.providers.embeddings import embedding_provider_from_settings
from mirix_site.search.spaces import write_embedders
from skills.models import Experience
from skills.services.experiences import ExperienceInput, experiences_record
from tests.factories import TenantFixture, api_client_with

PATH = "/memory/auto_dream?user_id=sam"
COUNTS = {"total", "merged", "superseded", "unchanged"}


def _owner(org: TenantFixture, user_id: str = "sam") -> Owner:
    end_user, _ = end_user_create_or_get(tenant=org.tenant, user_id=user_id, name=None)
    return Owner(org.organization.pk, org.client.pk, end_user.pk)


def _store(org: TenantFixture, *proposals: Proposal, user_id: str = "sam") -> None:
    memories_store(
        owner=_owner(org, user_id),
        proposals=list(proposals),
        embedders=write_embedders(),
        enabled_types={"core", "episodic", "semantic", "resource", "knowledge_vault"},
    )


def _fact(name: str, summary: str, source: int, **extra: object) -> Proposal:
    return Proposal("semantic", {"name": name, "summary": summary}, [source], **extra)


def _plant(org: TenantFixture, user_id: str = "sam") -> None:
    """A fact said three times (twice word for word, once reworded), its opposite, an unrelated
    fact, an event told twice the same day, a document shared twice, a vault entry given twice,
    and a core block with a repeated line."""
    now = timezone.now()
    _store(
        org,
        _fact("Coffee", "Sam likes coffee.", 1),
        _fact("Coffee", "Sam likes coffee.", 2),
        _fact("coffee", "Sam likes coffee!", 3),
        _fact("Coffee", "Sam dislikes coffee.", 4),
        _fact("Allergy", "Sam is allergic to penicillin.", 5),
        Proposal("episodic", {"summary": "Sam ran the Berlin marathon", "details": ""}, [6], now),
        Proposal(
            "episodic",
            {"summary": "Sam ran the Berlin marathon.", "details": ""},
            [7],
            now + timedelta(hours=2),
        ),
        Proposal(
            "episodic",
            {"summary": "Sam ran the Berlin marathon", "details": ""},
            [8],
            now - timedelta(days=30),
        ),
        Proposal("resource", {"title": "Q3 plan", "summary": "The Q3 plan"}, [9]),
        Proposal("resource", {"title": "Q3 plan", "summary": "The Q3 plan."}, [10]),
        Proposal(
            "knowledge_vault",
            {
                "caption": "Sam's work email",
                "secret_value": "sam@work.example",
                "sensitivity": "low",
            },
            [11],
        ),
        Proposal(
            "knowledge_vault",
            {
                "caption": "Sam's work email",
                "secret_value": "sam@work.example",
                "sensitivity": "low",
            },
            [12],
        ),
        Proposal(
            "knowledge_vault",
            {
                "caption": "Sam's home email",
                "secret_value": "sam@home.example",
                "sensitivity": "low",
            },
            [13],
        ),
        Proposal("core", {"label": "human", "value": "Sam likes tea.", "mode": "append"}, []),
        Proposal("core", {"label": "human", "value": "Sam lives in Leeds.", "mode": "append"}, []),
        user_id=user_id,
    )
    # The extractor never appends a line twice; a curator's or an import's block may hold one.
    CoreMemoryBlock.objects.filter(end_user__user_id=user_id).update(
        value="Sam likes tea.\nSam lives in Leeds.\nsam likes tea"
    )


def _state() -> list[tuple]:
    """Everything a dream could change: every memory and experience row's values (superseded_by
    and sources included), and every history row."""
    tables = [
        "memory_semanticmemory",
        "memory_episodicmemory",
        "memory_resourcememory",
        "memory_knowledgevaultitem",
        "memory_corememoryblock",
        "skills_experience",
        "memory_dreamrun",
        *(
            f"memory_{name}change"
            for name in (
                "semanticmemory",
                "episodicmemory",
                "resourcememory",
                "knowledgevaultitem",
                "corememoryblock",
            )
        ),
        "skills_experiencechange",
    ]
    rows = []
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"SELECT * FROM {table} ORDER BY 1")  # noqa: S608 (names above)
            rows.append((table, cursor.fetchall()))
    return rows


def test_a_fact_said_again_becomes_one_memory_citing_every_turn(org: TenantFixture) -> None:
    _plant(org)
    response = org.api.post(PATH, {"mode": "semantic"}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["types"]["semantic"] == {"total": 5, "merged": 1, "superseded": 2, "unchanged": 2}
    assert {key: body[key] for key in COUNTS} == body["types"]["semantic"]

    current = SemanticMemory.objects.filter(superseded_by__isnull=True)
    liked = current.get(summary__startswith="Sam likes")
    assert liked.source_message_ids == [1, 2, 3]
    # The opposite fact and the unrelated one stay current and apart.
    assert set(current.values_list("summary", flat=True)) == {
        liked.summary,
        "Sam dislikes coffee.",
        "Sam is allergic to penicillin.",
    }
    gone = SemanticMemory.objects.filter(superseded_by=liked)
    assert gone.count() == 2
    # A plain read and a search skip the superseded; include_superseded still finds them.
    read = org.api.get(f"/memory/semantic/{gone.first().pk}")
    assert read.status_code == 404
    kept = org.api.get(f"/memory/semantic/{gone.first().pk}", {"include_superseded": "true"})
    assert kept.status_code == 200
    found = org.api.get(
        "/memory/search",
        {"user_id": "sam", "query": "coffee", "memory_type": "semantic", "search_method": "bm25"},
    ).json()["results"]
    assert {int(hit["id"]) for hit in found} & set(gone.values_list("pk", flat=True)) == set()

    # Every change is auto-dream's, with its run.
    run = DreamRun.objects.get()
    assert run.state == "succeeded" and run.trigger == "request" and body["dream_run_id"] == run.pk
    for row in gone:
        [entry] = history_of(row)
        assert entry["actor"] == "auto_dream" and entry["run_id"] == run.pk
        assert entry["changes"]["superseded_by"] == {"before": None, "after": str(liked.pk)}
    [entry] = history_of(liked)
    assert entry["actor"] == "auto_dream"
    assert entry["changes"]["source_message_ids"]["after"] == [1, 2, 3]

    # A second run changes nothing.
    before = _state()
    again = org.api.post(PATH, {"mode": "semantic"}, format="json").json()
    assert again["types"]["semantic"] == {"total": 3, "merged": 0, "superseded": 0, "unchanged": 3}
    after = _state()
    assert [rows for table, rows in after if table != "memory_dreamrun"] == [
        rows for table, rows in before if table != "memory_dreamrun"
    ]


def test_a_dry_run_reports_the_same_and_changes_nothing(org: TenantFixture) -> None:
    _plant(org)
    before = _state()
    dry = org.api.post(PATH, {"mode": "all", "dry_run": True}, format="json")
    assert dry.status_code == 200, dry.content
    assert _state() == before
    real = org.api.post(PATH, {"mode": "all"}, format="json")
    assert real.status_code == 200, real.content
    for name in ("core", "episodic", "semantic", "resource", "knowledge_vault", "experience"):
        assert dry.json()["types"][name] == real.json()["types"][name], name
    assert "procedural" in real.json()["types"]
    types = real.json()["types"]
    assert types["episodic"] == {"total": 3, "merged": 1, "superseded": 1, "unchanged": 1}
    assert types["resource"] == {"total": 2, "merged": 1, "superseded": 1, "unchanged": 0}
    assert types["knowledge_vault"] == {"total": 3, "merged": 1, "superseded": 1, "unchanged": 1}
    assert types["core"]["merged"] == 1 and types["core"]["lines_folded"] == 1
    assert CoreMemoryBlock.objects.get().value == "Sam likes tea.\nSam lives in Leeds."
    # The month-old telling is another day's event; the two of today are one.
    episodes = EpisodicMemory.objects.filter(superseded_by__isnull=True)
    assert sorted(len(row.source_message_ids) for row in episodes) == [1, 2]
    # The vault's two captions stay two entries; the repeated one is one.
    assert KnowledgeVaultItem.objects.filter(superseded_by__isnull=True).count() == 2
    assert ResourceMemory.objects.filter(superseded_by__isnull=True).get().source_message_ids == [
        9,
        10,
    ]
    # And a second run of every mode changes nothing.
    state = _state()
    second = org.api.post(PATH, {"mode": "all"}, format="json").json()["types"]
    assert all(
        second[name]["merged"] == 0
        for name in ("core", "episodic", "semantic", "resource", "knowledge_vault", "experience")
    )
    assert [rows for table, rows in _state() if table != "memory_dreamrun"] == [
        rows for table, rows in state if table != "memory_dreamrun"
    ]


def _similarity(left: SemanticMemory, right: SemanticMemory) -> float:
    vectors = [
        np.asarray(SemanticEmbedding.objects.get(memory=row, chunk_index=0).embedding)
        for row in (left, right)
    ]
    return float(vectors[0] @ vectors[1] / np.linalg.norm(vectors[0]) / np.linalg.norm(vectors[1]))


def test_a_reworded_fact_merges_by_its_embedding(org: TenantFixture) -> None:
    _store(
        org,
        _fact("Allergy", "Sam is allergic to penicillin.", 1),
        _fact("Allergy", "Sam has an allergy to penicillin.", 2),
        _fact("Home", "Sam lives in Paris.", 3),
        _fact("Home", "Sam lives in Berlin.", 4),
    )
    body = org.api.post(PATH, {"mode": "semantic"}, format="json").json()
    assert body["types"]["semantic"] == {"total": 4, "merged": 1, "superseded": 1, "unchanged": 2}
    kept = SemanticMemory.objects.get(superseded_by__isnull=True, name="Allergy")
    assert kept.summary == "Sam has an allergy to penicillin." and kept.source_message_ids == [1, 2]
    assert SemanticMemory.objects.filter(superseded_by__isnull=True, name="Home").count() == 2


OPPOSITES = [
    (
        "Sam likes working late at the office on Fridays when the team ships a release.",
        "Sam dislikes working late at the office on Fridays when the team ships a release.",
    ),
    (
        "Sam wants the weekly report emailed to the whole data team on Friday.",
        "Sam doesn't want the weekly report emailed to the whole data team on Friday.",
    ),
    (
        "Sam can eat gluten at the team lunch on Wednesday.",
        "Sam cannot eat gluten at the team lunch on Wednesday.",
    ),
    ("Sam is happy with the new standing desk.", "Sam is unhappy with the new standing desk."),
    ("Sam has 3 kids.", "Sam has 2 kids."),
]


def test_opposite_facts_never_merge(org: TenantFixture) -> None:
    for index, (said, opposite) in enumerate(OPPOSITES):
        _store(org, _fact("Fact", said, 2 * index), _fact("Fact", opposite, 2 * index + 1))
    numbers = SemanticMemory.objects.filter(summary__contains="kids").order_by("pk")
    # The numbers' pair embeds nearer than the merge threshold: the guard keeps it apart.
    assert _similarity(*numbers) >= MERGE_SIMILARITY
    body = org.api.post(PATH, {"mode": "semantic"}, format="json").json()
    assert body["types"]["semantic"]["merged"] == 0
    assert SemanticMemory.objects.filter(superseded_by__isnull=True).count() == 2 * len(OPPOSITES)


def test_the_guard_not_the_threshold_keeps_opposites_apart() -> None:
    """At a threshold low enough to join every pair above (the lowest of their similarities,
    itself high), the guard alone keeps each fact and its opposite apart, and a rewording
    still joins."""
    texts = [text for pair in OPPOSITES for text in pair]
    texts += ["Sam is allergic to penicillin.", "Sam has an allergy to penicillin."]
    vectors = embedding_provider_from_settings().embed(texts)
    candidates = [
        Candidate(index, text, vector)
        for index, (text, vector) in enumerate(zip(texts, vectors, strict=True))
    ]
    threshold = min(
        float(np.dot(left.vector, right.vector))
        / float(np.linalg.norm(left.vector) * np.linalg.norm(right.vector))
        for left, right in zip(candidates[::2], candidates[1::2], strict=True)
    )
    assert threshold >= 0.8
    [cluster] = duplicates_group(candidates, threshold=threshold - 1e-6)
    assert (cluster.keeper, cluster.others) == (len(texts) - 2, [len(texts) - 1])


def _grouped_one_by_one(
    candidates: list[Candidate], threshold: float, comparable
) -> list[tuple[int, list[int]]]:
    """The rule as its docstring says it, each row against each keeper in turn: what the
    blocked matrix products must agree with."""
    keepers: list[Candidate] = []
    clusters: dict[int, list[int]] = {}
    for candidate in candidates:
        for index, keeper in enumerate(keepers):
            if not comparable(keeper.row, candidate.row):
                continue
            same = text_normalise(candidate.text) == text_normalise(keeper.text)
            similar = (
                candidate.vector is not None
                and keeper.vector is not None
                and text_normalise(candidate.text) != ""
                and float(np.dot(candidate.vector, keeper.vector)) >= threshold
                and texts_opposed(keeper.text, candidate.text) is None
            )
            if (text_normalise(candidate.text) and same) or similar:
                clusters.setdefault(index, []).append(candidate.row)
                break
        else:
            keepers.append(candidate)
    return [(keepers[index].row, rows) for index, rows in sorted(clusters.items())]


def test_the_grouping_by_blocks_agrees_with_comparing_one_by_one(monkeypatch) -> None:
    """Rows grouped a few at a time (blocks of 7 of 300): repeated texts, vectors near and far
    from their topic's (some rows not embedded), opposites and rows that may not be compared
    give the clusters a row-by-row comparison gives."""
    monkeypatch.setattr(consolidation, "SIMILARITY_BLOCK", 7)
    rng = np.random.default_rng(5)
    topics = rng.standard_normal((12, 32))
    words = ["Sam", "likes", "dislikes", "not", "coffee", "tea", "3", "2", "kids", "Paris"]
    candidates = []
    for row in range(300):
        topic = int(rng.integers(12))
        vector = topics[topic] + rng.standard_normal(32) * rng.choice([0.01, 0.05, 0.5])
        text = " ".join(rng.choice(words, 3)) if row % 2 else f"topic {topic} {rng.choice(words)}"
        unit = (vector / np.linalg.norm(vector)).astype("f4")
        candidates.append(Candidate(row, text, None if row % 10 == 3 else unit))
    threshold = 0.99

    def comparable(left: int, right: int) -> bool:
        return left % 5 != 4 and right % 5 != 4

    grouped = duplicates_group(candidates, threshold=threshold, comparable=comparable)
    expected = _grouped_one_by_one(candidates, threshold, comparable)
    assert [(cluster.keeper, cluster.others) for cluster in grouped] == expected
    assert len(expected) > 10 and sum(len(rows) for _, rows in expected) > 50


@override_settings(AUTO_DREAM_MAX_ROWS=3)
def test_a_dream_compares_the_newest_memories_of_a_type_up_to_its_window(
    org: TenantFixture,
) -> None:
    """Past ``AUTO_DREAM_MAX_ROWS`` a dream compares the newest rows only (older ones were
    compared by the dreams after them): a pair said again among the newest merges, a pair
    older than the window stays as it is, and ``total`` counts the rows compared."""
    _store(org, _fact("Tea", "Sam likes tea.", 1), _fact("Tea", "Sam likes tea.", 2))
    _store(org, _fact("Coffee", "Sam likes coffee.", 3))
    _store(org, _fact("Coffee", "Sam likes coffee.", 4), _fact("Allergy", "Sam is allergic.", 5))
    body = org.api.post(PATH, {"mode": "semantic"}, format="json").json()
    assert body["types"]["semantic"] == {"total": 3, "merged": 1, "superseded": 1, "unchanged": 1}
    current = SemanticMemory.objects.filter(superseded_by__isnull=True)
    assert sorted(current.values_list("summary", flat=True)) == [
        "Sam is allergic.",
        "Sam likes coffee.",
        "Sam likes tea.",
        "Sam likes tea.",
    ]


def test_only_the_same_tags_and_the_callers_own_memories_merge(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    _store(
        org,
        _fact("Coffee", "Sam likes coffee.", 1, filter_tags={"project": "a"}),
        _fact("Coffee", "Sam likes coffee.", 2, filter_tags={"project": "b"}),
    )
    _store(
        other_org, _fact("Coffee", "Sam likes coffee.", 1), _fact("Coffee", "Sam likes coffee.", 2)
    )
    body = org.api.post(PATH, {"mode": "semantic"}, format="json").json()
    assert body["types"]["semantic"]["merged"] == 0
    # Another organization's user of the same name is not the caller's: untouched.
    assert SemanticMemory.objects.filter(superseded_by__isnull=False).count() == 0


def test_a_fact_said_under_each_turns_own_id_merges_and_either_id_finds_it(
    org: TenantFixture,
) -> None:
    # A client keeping its message ids as tags (TURN_TAG_KEYS): the same scope.
    def said(message_id: str) -> dict[str, str]:
        return {"project": "a", "message_id": message_id}

    _store(
        org,
        _fact("Coffee", "Sam likes coffee.", 1, filter_tags=said("m1")),
        _fact("Coffee", "Sam likes coffee.", 2, filter_tags=said("m2")),
        _fact("Coffee", "Sam likes coffee.", 3, filter_tags={"project": "b", "message_id": "m3"}),
    )
    body = org.api.post(PATH, {"mode": "semantic"}, format="json").json()

    assert body["types"]["semantic"]["merged"] == 1
    [kept] = SemanticMemory.objects.filter(superseded_by__isnull=True, filter_tags__project="a")
    assert kept.source_message_ids == [1, 2]
    assert kept.filter_tags == {"project": "a"}
    assert sorted(kept.turn_tags, key=str) == [said("m1"), said("m2")]
    for message_id in ("m1", "m2"):
        found = org.api.get(
            "/memory/search",
            {
                "user_id": "sam",
                "query": "coffee",
                "memory_type": "semantic",
                "filter_tags": f'{{"message_id": "{message_id}"}}',
            },
        ).json()["results"]
        assert [result["id"] for result in found] == [str(kept.pk)]


def test_experiences_recorded_twice_from_the_same_turns_become_one(org: TenantFixture) -> None:
    same = ExperienceInput(task="fix the slow login", action="add a cache", outcome="success")
    recorded = experiences_record(tenant=org.tenant, user_id="sam", items=[same] * 4)
    # Two of them distilled from the same turn (a lesson written twice for one session).
    twice = [row.pk for row in recorded.experiences[:2]]
    Experience.objects.filter(pk__in=twice).update(source_message_ids=[7])
    body = org.api.post(PATH, {"mode": "experience"}, format="json").json()
    # Two observations without provenance are two observations; the same turns twice is one.
    assert body["types"]["experience"] == {"total": 4, "merged": 1, "superseded": 1, "unchanged": 2}
    [gone] = Experience.objects.filter(superseded_by__isnull=False)
    assert gone.superseded_at is not None
    [entry] = history_of(gone)
    assert entry["actor"] == "auto_dream"
    again = org.api.post(PATH, {"mode": "experience"}, format="json").json()
    assert again["types"]["experience"]["merged"] == 0


@override_settings(AUTO_DREAM_MAX_ROWS=3)
def test_a_dream_of_experiences_reads_the_newest_up_to_its_window(org: TenantFixture) -> None:
    """The same window as memories': an attempt recorded again among the newest three merges,
    one recorded twice before them stays as it is."""
    old = ExperienceInput(task="fix the slow login", action="add a cache", outcome="success")
    new = ExperienceInput(task="ship the report", action="run the export", outcome="failure")
    other = ExperienceInput(task="rotate the keys", action="use the vault", outcome="success")
    recorded = experiences_record(
        tenant=org.tenant, user_id="sam", items=[old, old, new, new, other]
    ).experiences
    for pk, turn in zip([row.pk for row in recorded], [1, 1, 2, 2, 3], strict=True):
        Experience.objects.filter(pk=pk).update(source_message_ids=[turn])
    body = org.api.post(PATH, {"mode": "experience"}, format="json").json()
    assert body["types"]["experience"] == {"total": 3, "merged": 1, "superseded": 1, "unchanged": 1}
    gone = Experience.objects.filter(superseded_by__isnull=False)
    assert [row.task for row in gone] == ["ship the report"]


def test_an_operator_restores_a_merged_memory_from_the_admin(client, org: TenantFixture) -> None:
    _plant(org)
    org.api.post(PATH, {"mode": "semantic"}, format="json")
    gone = SemanticMemory.objects.filter(superseded_by__isnull=False).order_by("pk").first()
    operator = get_user_model().objects.create_superuser("operator", "op@example.com", "pw")
    client.force_login(operator)
    response = client.post(
        "/admin/memory/semanticmemory/",
        {"action": "restore", "_selected_action": [gone.pk]},
    )
    assert response.status_code == 302
    gone.refresh_from_db()
    assert gone.superseded_by_id is None
    dream, restore = history_of(gone)
    assert dream["actor"] == "auto_dream"
    assert restore["actor"] == "operator" and restore["operator"] == "operator"
    assert restore["changes"]["superseded_by"]["after"] is None
    assert org.api.get(f"/memory/semantic/{gone.pk}").status_code == 200


def test_bad_modes_users_and_keys_are_refused(org: TenantFixture, other_org: TenantFixture) -> None:
    _plant(org)
    bad = org.api.post(PATH, {"mode": "lucid"}, format="json")
    assert bad.status_code == 422 and "mode" in bad.json()["fields"]
    # Another tenant's user answers like a missing one.
    assert other_org.api.post(PATH, {"mode": "semantic"}, format="json").status_code == 404
    assert api_client_with(None).post(PATH, {"mode": "semantic"}, format="json").status_code == 401
    assert (
        api_client_with("mxk_bad_key").post(PATH, {"mode": "all"}, format="json").status_code == 401
    )
    assert SemanticMemory.objects.filter(superseded_by__isnull=False).count() == 0


@pytest.mark.django_db(transaction=True)
def test_the_beat_queues_one_dream_per_user_after_enough_new_memories(
    org: TenantFixture,
) -> None:
    _store(org, *(_fact("Coffee", "Sam likes coffee.", index) for index in range(1, 4)))
    _store(org, _fact("Tea", "Kim likes tea.", 1), user_id="kim")
    with override_settings(AUTO_DREAM_AFTER_NEW_MEMORIES=0):
        assert dreams_due_queue() == 0
    with override_settings(AUTO_DREAM_AFTER_NEW_MEMORIES=3):
        assert dreams_due_queue() == 1
        # Queued already: never a second one for the user.
        assert dreams_due_queue() == 0
    [run] = DreamRun.objects.all()
    sam = end_user_get(tenant=org.tenant, user_id="sam")
    assert (run.end_user_id, run.state, run.trigger, run.mode) == (
        sam.pk,
        "queued",
        "threshold",
        "all",
    )
    assert dream_run_task(org.organization.pk, run.pk) == "succeeded"
    run.refresh_from_db()
    assert run.report["types"]["semantic"]["superseded"] == 2
    [gone, _] = SemanticMemory.objects.filter(superseded_by__isnull=False)
    assert history_of(gone)[0]["run_id"] == run.pk
    # The run taken: a redelivery does nothing; no new memories since, so no new dream.
    assert dream_run_task(org.organization.pk, run.pk) is None
    with override_settings(AUTO_DREAM_AFTER_NEW_MEMORIES=3):
        assert dreams_due_queue() == 0


def _rows_as_stored(model: type) -> list[dict]:
    """Every row of ``model`` as an operator reads it: all its columns but ``updated_at``."""
    fields = [field.attname for field in model._meta.concrete_fields if field.name != "updated_at"]
    return list(model.objects.order_by("pk").values(*fields))


def _restore_from_admin(client, rows: list) -> None:
    response = client.post(
        f"/admin/memory/{rows[0]._meta.model_name}/",
        {"action": "restore", "_selected_action": [row.pk for row in rows]},
    )
    assert response.status_code == 302


def _tag_search(org: TenantFixture, query: str, message_id: str) -> list[str]:
    found = org.api.get(
        "/memory/search",
        {
            "user_id": "sam",
            "query": query,
            "memory_type": "semantic",
            "filter_tags": f'{{"message_id": "{message_id}"}}',
        },
    )
    assert found.status_code == 200, found.content
    return [result["id"] for result in found.json()["results"]]


def test_restoring_a_merge_leaves_every_row_as_it_was_before_the_merge(
    client, org: TenantFixture
) -> None:
    # The same fact said on two days, each turn under its own id (a client keeping its message
    # ids as tags): the merge gives the newer fact the older one's turn, tag and earlier time.
    first_day = timezone.now() - timedelta(days=9)
    for number, when in ((1, first_day), (2, first_day + timedelta(days=4))):
        added = org.api.post(
            "/memory/add",
            {
                "user_id": "sam",
                "messages": [{"role": "user", "content": "I live in Paris"}],
                "occurred_at": when.isoformat(),
                "filter_tags": {"project": "a", "message_id": f"m{number}"},
            },
            format="json",
        )
        assert added.status_code == 202, added.content
    for job in ExtractionJob.objects.filter(status=ExtractionJob.Status.QUEUED).order_by("id"):
        extraction_job_run(organization_id=job.organization_id, job_id=job.pk)
    older, newer = SemanticMemory.objects.filter(summary="User lives in Paris.").order_by(
        "valid_from"
    )
    before = _rows_as_stored(SemanticMemory)
    assert _tag_search(org, "Paris", "m1") == [str(older.pk)]

    body = org.api.post(PATH, {"mode": "semantic"}, format="json").json()
    assert body["types"]["semantic"]["merged"] == 1
    turns = sorted(older.source_message_ids + newer.source_message_ids)
    newer.refresh_from_db()
    assert newer.source_message_ids == turns
    assert len(newer.turn_tags) == 2 and newer.valid_from == older.valid_from
    assert _tag_search(org, "Paris", "m1") == [str(newer.pk)]

    operator = get_user_model().objects.create_superuser("operator", "op@example.com", "pw")
    client.force_login(operator)
    _restore_from_admin(client, [older])

    assert _rows_as_stored(SemanticMemory) == before
    # A filter naming the first turn finds the memory citing it, and the kept one no more.
    assert _tag_search(org, "Paris", "m1") == [str(older.pk)]
    assert _tag_search(org, "Paris", "m2") == [str(newer.pk)]
    # The undoing is the operator's, in the kept memory's history.
    newer.refresh_from_db()
    merge, undone = history_of(newer)
    assert (merge["actor"], undone["actor"]) == ("auto_dream", "operator")
    assert undone["changes"]["source_message_ids"] == {
        "before": turns,
        "after": newer.source_message_ids,
    }
    assert undone["changes"]["turn_tags"]["after"] == [{"project": "a", "message_id": "m2"}]


def test_restoring_one_of_a_merge_keeps_the_turns_of_the_others(client, org: TenantFixture) -> None:
    now = timezone.now()
    _store(
        org,
        *(
            _fact(
                "Coffee",
                "Sam likes coffee.",
                source,
                occurred_at=now - timedelta(days=10 - source),
                filter_tags={"project": "a", "message_id": f"m{source}"},
            )
            for source in (1, 2, 3)
        ),
    )
    before = _rows_as_stored(SemanticMemory)
    org.api.post(PATH, {"mode": "semantic"}, format="json")
    kept = SemanticMemory.objects.get(superseded_by__isnull=True)
    assert kept.source_message_ids == [1, 2, 3]
    first, second = SemanticMemory.objects.filter(superseded_by=kept).order_by("valid_from")
    operator = get_user_model().objects.create_superuser("operator", "op@example.com", "pw")
    client.force_login(operator)

    _restore_from_admin(client, [first])
    kept.refresh_from_db()
    # Still one memory with the second saying: its turn, its tag, its time.
    assert kept.source_message_ids == [2, 3]
    assert sorted(tags["message_id"] for tags in kept.turn_tags) == ["m2", "m3"]
    assert kept.filter_tags == {"project": "a"}
    assert kept.valid_from == second.valid_from

    _restore_from_admin(client, [second])
    assert _rows_as_stored(SemanticMemory) == before


def _coffee(org: TenantFixture, source: int, days_ago: int) -> None:
    _store(
        org,
        _fact(
            "Coffee",
            "Sam likes coffee.",
            source,
            occurred_at=timezone.now() - timedelta(days=days_ago),
            filter_tags={"project": "a", "message_id": f"m{source}"},
        ),
    )


def test_restoring_a_merge_into_a_memory_merged_again_later_undoes_it_down_the_chain(
    org: TenantFixture,
) -> None:
    _coffee(org, 1, days_ago=9)
    _coffee(org, 2, days_ago=8)
    org.api.post(PATH, {"mode": "semantic"}, format="json")
    first, second = SemanticMemory.objects.order_by("pk")
    assert first.superseded_by_id == second.pk
    _coffee(org, 3, days_ago=1)
    org.api.post(PATH, {"mode": "semantic"}, format="json")
    third = SemanticMemory.objects.get(superseded_by__isnull=True)
    assert third.source_message_ids == [1, 2, 3]

    memory_restore(memory_type=MEMORY_TYPES["semantic"], rows=[first])

    second.refresh_from_db()
    third.refresh_from_db()
    assert (second.source_message_ids, second.superseded_by_id) == ([2], third.pk)
    assert [tags["message_id"] for tags in second.turn_tags] == ["m2"]
    assert third.source_message_ids == [2, 3]
    assert sorted(tags["message_id"] for tags in third.turn_tags) == ["m2", "m3"]
    assert third.valid_from == second.valid_from


def test_a_merge_made_before_tags_were_in_the_history_is_restored_keeping_its_tags(
    org: TenantFixture,
) -> None:
    _coffee(org, 1, days_ago=9)
    _coffee(org, 2, days_ago=8)
    org.api.post(PATH, {"mode": "semantic"}, format="json")
    # As events written before migration 0018 read once it ran: its columns' defaults.
    events = apps.get_model("memory", "SemanticMemoryChange")
    events.objects.update(turn_tags=[], filter_tags={})

    migration = importlib.import_module("memory.migrations.0018_history_of_merged_turn_tags")
    migration.events_tags_backfill(apps, None)

    first, kept = SemanticMemory.objects.order_by("pk")
    [merge] = history_of(kept)
    assert set(merge["changes"]) == {"source_message_ids", "valid_from"}
    memory_restore(memory_type=MEMORY_TYPES["semantic"], rows=[first])
    kept.refresh_from_db()
    # Its turns are its own again; the tags it was given, unknown before then, stay.
    assert kept.source_message_ids == [2]
    assert sorted(tags["message_id"] for tags in kept.turn_tags) == ["m1", "m2"]
