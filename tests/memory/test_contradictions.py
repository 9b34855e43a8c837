"""A fact a later turn contradicts (issue 39 item 3): "I live in Paris" on day 1, "we moved to
Berlin" on day 5. Auto-dream keeps the old fact, superseded by the new one with a validity end
at the new one's turn; the ``human`` block lists the current fact only; a search answers Berlin,
and the same search as of day 3 answers Paris."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from memory.contradictions import Stated, contradictions_find, contradicts
from memory.models import CoreMemoryBlock, DreamRun, ExtractionJob, SemanticMemory
from memory.services import extraction_job_run
from memory.services.dreams import memory_restore
from memory.types import MEMORY_TYPES
from mirix_site.common.history import history_of
from tests.factories import TenantFixture, api_client_with, chat_turns

DREAM = "/memory/auto_dream?user_id=sam"
DAY_1 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def day(number: int) -> datetime:
    return DAY_1 + timedelta(days=number - 1)


def said(org: TenantFixture, text: str, when: datetime, *, user_id: str = "sam", **body: Any):
    response = org.api.post(
        "/memory/add",
        {
            "user_id": user_id,
            "messages": chat_turns(text, "Noted."),
            "occurred_at": when.isoformat(),
            **body,
        },
        format="json",
    )
    assert response.status_code == 202, response.json()


def extract() -> None:
    for job in ExtractionJob.objects.filter(status=ExtractionJob.Status.QUEUED).order_by("id"):
        extraction_job_run(organization_id=job.organization_id, job_id=job.pk)


def dream(org: TenantFixture, **body: Any) -> dict[str, Any]:
    response = org.api.post(DREAM, {"mode": "semantic", **body}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def fact(summary: str) -> SemanticMemory:
    return SemanticMemory.objects.get(summary=summary)


def search(org: TenantFixture, query: str, **params: Any) -> list[str]:
    response = org.api.get(
        "/memory/search",
        {"user_id": "sam", "query": query, "memory_type": "semantic", **params},
    )
    assert response.status_code == 200, response.content
    return [result["summary"] for result in response.json()["results"]]


def human_block() -> list[str]:
    return CoreMemoryBlock.objects.get(label="human").value.splitlines()


def rows() -> list[tuple]:
    """Every row a semantic dream could change, and their history."""
    tables = (
        "memory_semanticmemory",
        "memory_semanticmemorychange",
        "memory_corememoryblock",
        "memory_corememoryblockchange",
    )
    found = []
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"SELECT * FROM {table} ORDER BY 1")  # noqa: S608 (names above)
            found.append(cursor.fetchall())
    return found


def test_a_move_supersedes_where_the_user_lived_and_as_of_still_finds_it(
    org: TenantFixture,
) -> None:
    said(org, "I live in Paris", day(1))
    said(org, "we moved to Berlin", day(5))
    extract()
    paris, berlin = fact("User lives in Paris."), fact("User moved to Berlin and lives there.")
    assert (paris.subject, paris.predicate, paris.value) == ("user", "lives_in", "Paris")
    assert (berlin.predicate, berlin.value, berlin.valid_from) == ("moved_to", "Berlin", day(5))
    assert (paris.valid_from, paris.valid_until) == (day(1), None)
    assert human_block() == ["User lives in Paris.", "User moved to Berlin and lives there."]

    body = dream(org)
    assert body["types"]["semantic"] == {"total": 2, "merged": 0, "superseded": 1, "unchanged": 1}

    paris.refresh_from_db()
    assert paris.superseded_by_id == berlin.pk and paris.valid_until == day(5)
    berlin.refresh_from_db()
    assert berlin.superseded_by_id is None and berlin.valid_until is None
    # The old fact is kept, marked, by auto-dream's run.
    [entry] = history_of(paris)
    assert entry["actor"] == "auto_dream" and entry["run_id"] == DreamRun.objects.get().pk
    assert entry["changes"]["superseded_by"] == {"before": None, "after": str(berlin.pk)}
    assert entry["changes"]["valid_until"]["before"] is None
    # The block lists the current fact only, and says who changed it.
    assert human_block() == ["User moved to Berlin and lives there."]
    *_appended, block_entry = history_of(CoreMemoryBlock.objects.get(label="human"))
    assert block_entry["actor"] == "auto_dream"
    assert block_entry["changes"]["value"]["after"] == "User moved to Berlin and lives there."

    assert search(org, "where do I live")[0] == "User moved to Berlin and lives there."
    assert "User lives in Paris." not in search(org, "where do I live")
    as_of_day_3 = search(org, "where do I live", as_of=day(3).isoformat())
    assert as_of_day_3[0] == "User lives in Paris."
    assert "User moved to Berlin and lives there." not in as_of_day_3
    # Day 5 itself: the move has happened.
    assert (
        search(org, "where do I live", as_of=day(5).isoformat())[0]
        == "User moved to Berlin and lives there."
    )
    # Before anything was said, no fact held.
    assert search(org, "where do I live", as_of=(DAY_1 - timedelta(days=1)).isoformat()) == []
    # Each result says when it held.
    found = org.api.get(
        "/memory/search",
        {
            "user_id": "sam",
            "query": "Paris",
            "memory_type": "semantic",
            "as_of": day(2).isoformat(),
        },
    ).json()["results"]
    assert found[0]["valid_until"] == day(5).isoformat()
    assert found[0]["valid_from"] == day(1).isoformat()
    assert (found[0]["predicate"], found[0]["value"]) == ("lives_in", "Paris")


def test_a_dry_run_reports_the_same_and_a_second_run_changes_nothing(org: TenantFixture) -> None:
    said(org, "I live in Paris", day(1))
    said(org, "I use Postgres for everything", day(1))
    said(org, "we moved to Berlin", day(5))
    said(org, "I switched from Postgres to SQLite", day(6))
    extract()
    before = rows()
    dry = dream(org, dry_run=True)
    assert rows() == before
    assert dry["types"]["semantic"]["superseded"] == 2
    real = dream(org)
    assert real["types"]["semantic"] == dry["types"]["semantic"]
    assert human_block() == [
        "User moved to Berlin and lives there.",
        "User switched from Postgres to SQLite.",
    ]

    after = rows()
    again = dream(org)
    assert again["types"]["semantic"] == {"total": 2, "merged": 0, "superseded": 0, "unchanged": 2}
    assert rows() == after


@pytest.mark.parametrize(
    ("earlier", "later", "old", "new"),
    [
        ("I use Vim", "I switched from Vim to Helix", "User uses Vim.", None),
        ("I prefer Postgres", "I switched from Postgres to SQLite", "User prefers Postgres.", None),
        ("I have a dog named Rex", "I don't have a dog anymore", "User has a pet: dog: Rex.", None),
        ("I play chess", "I no longer play chess", "User's hobby: chess.", None),
        ("I'm 34", "I'm 35 now", "User is 34 years old.", "User is 35 years old."),
        ("I work at Google", "I work at Stripe now", "User works at Google.", None),
    ],
)
def test_a_later_change_supersedes_what_it_ends(
    org: TenantFixture, earlier: str, later: str, old: str, new: str | None
) -> None:
    said(org, earlier, day(1))
    said(org, later, day(9))
    extract()
    dream(org)
    ended = fact(old)
    assert ended.superseded_by_id is not None and ended.valid_until == day(9)
    [current] = SemanticMemory.objects.filter(superseded_by__isnull=True)
    assert current.valid_from == day(9)
    if new is not None:
        assert current.summary == new
    assert old not in human_block() and current.summary in human_block()


@pytest.mark.parametrize(
    ("earlier", "later"),
    [
        # Many values at once: both hold.
        ("I like tea", "I like coffee"),
        ("I speak French", "I speak German"),
        ("I use Postgres", "I use Redis"),
        # A restriction sits beside a diet.
        ("I'm vegan", "I'm gluten free"),
        # Said again: a merge, not a contradiction.
        ("I live in Paris", "I live in Paris"),
    ],
)
def test_facts_that_hold_together_are_not_superseded(
    org: TenantFixture, earlier: str, later: str
) -> None:
    said(org, earlier, day(1))
    said(org, later, day(9))
    extract()
    body = dream(org)
    assert SemanticMemory.objects.filter(valid_until__isnull=False).count() == 0
    if earlier == later:
        assert body["types"]["semantic"]["merged"] == 1
        # The merged fact holds from its first saying.
        [kept] = SemanticMemory.objects.filter(superseded_by__isnull=True)
        assert kept.valid_from == day(1)
        assert search(org, "Paris", as_of=day(3).isoformat()) == ["User lives in Paris."]
    else:
        assert body["types"]["semantic"]["superseded"] == 0


@pytest.mark.parametrize(
    ("resumed", "now"),
    [
        ("I use Postgres again", "User uses Postgres."),
        ("I'm back on Postgres", "User uses Postgres."),
        ("I switched back to Postgres", "User switched to Postgres."),
    ],
)
def test_saying_one_does_something_again_ends_the_earlier_no_longer(
    org: TenantFixture, resumed: str, now: str
) -> None:
    said(org, "I use Postgres", day(1))
    said(org, "I no longer use Postgres", day(5))
    said(org, resumed, day(9))
    extract()
    used = SemanticMemory.objects.get(summary="User uses Postgres.", valid_from=day(1))
    stopped = fact("User no longer: Postgres.")
    again = SemanticMemory.objects.get(summary=now, valid_from=day(9))
    before = rows()
    dry = dream(org, dry_run=True)
    assert rows() == before

    body = dream(org)
    assert body["types"]["semantic"] == dry["types"]["semantic"]
    assert body["types"]["semantic"]["superseded"] == 2
    used.refresh_from_db()
    stopped.refresh_from_db()
    assert (used.superseded_by_id, used.valid_until) == (stopped.pk, day(5))
    # The "no longer" is kept, marked, with the turn that replaced it and its end.
    assert (stopped.superseded_by_id, stopped.valid_until) == (again.pk, day(9))
    assert history_of(stopped)[0]["actor"] == "auto_dream"
    again.refresh_from_db()
    assert (again.superseded_by_id, again.valid_until) == (None, None)
    assert "User no longer: Postgres." not in human_block()
    assert now in human_block()

    assert search(org, "Postgres")[0] == now
    assert "User no longer: Postgres." not in search(org, "Postgres")
    assert search(org, "Postgres", as_of=day(7).isoformat()) == ["User no longer: Postgres."]
    assert search(org, "Postgres", as_of=day(3).isoformat()) == ["User uses Postgres."]
    # A second run changes nothing.
    after = rows()
    assert dream(org)["types"]["semantic"]["superseded"] == 0
    assert rows() == after


def test_two_peoples_facts_never_supersede_each_other(org: TenantFixture) -> None:
    org.api.post(
        "/memory/add",
        {
            "user_id": "sam",
            "messages": [{"role": "user", "content": "Caroline: I live in Paris"}],
            "occurred_at": day(1).isoformat(),
        },
        format="json",
    )
    org.api.post(
        "/memory/add",
        {
            "user_id": "sam",
            "messages": [{"role": "user", "content": "Melanie: I live in Berlin"}],
            "occurred_at": day(2).isoformat(),
        },
        format="json",
    )
    said(org, "my sister Ana lives in Rome", day(3))
    said(org, "I live in Lisbon", day(4))
    extract()
    assert set(SemanticMemory.objects.values_list("subject", flat=True)) == {
        "Caroline",
        "Melanie",
        "Ana (sister)",
        "user",
    }
    assert dream(org)["types"]["semantic"]["superseded"] == 0


def test_facts_under_other_tags_are_not_compared(org: TenantFixture) -> None:
    said(org, "I use Postgres", day(1), filter_tags={"project": "main"})
    said(org, "I switched from Postgres to SQLite", day(2), filter_tags={"project": "side"})
    extract()
    assert dream(org)["types"]["semantic"]["superseded"] == 0


def test_a_chain_of_moves_ends_each_home_at_the_next(org: TenantFixture) -> None:
    said(org, "I live in Paris", day(1))
    said(org, "we moved to Berlin", day(5))
    said(org, "we moved to Rome", day(9))
    extract()
    assert dream(org)["types"]["semantic"]["superseded"] == 2
    paris, berlin = fact("User lives in Paris."), fact("User moved to Berlin and lives there.")
    rome = fact("User moved to Rome and lives there.")
    assert (paris.superseded_by_id, paris.valid_until) == (berlin.pk, day(5))
    assert (berlin.superseded_by_id, berlin.valid_until) == (rome.pk, day(9))
    assert human_block() == ["User moved to Rome and lives there."]
    for moment, home in ((2, "Paris"), (6, "Berlin"), (10, "Rome")):
        found = search(org, "Paris Berlin Rome", as_of=day(moment).isoformat())
        assert len(found) == 1 and home in found[0], moment


def test_an_operator_restores_a_superseded_fact_as_valid(org: TenantFixture) -> None:
    said(org, "I live in Paris", day(1))
    said(org, "we moved to Berlin", day(5))
    extract()
    dream(org)
    paris = fact("User lives in Paris.")
    assert memory_restore(memory_type=MEMORY_TYPES["semantic"], rows=[paris]) == 1
    paris.refresh_from_db()
    assert (paris.superseded_by_id, paris.valid_until) == (None, None)
    assert "User lives in Paris." in search(org, "Paris")


def test_as_of_is_checked_and_scoped_like_every_parameter(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    said(org, "I live in Paris", day(1))
    extract()
    bad = org.api.get("/memory/search", {"user_id": "sam", "query": "Paris", "as_of": "day 3"})
    assert bad.status_code == 422 and "as_of" in bad.json()["fields"]
    params = {"user_id": "sam", "query": "Paris", "as_of": day(3).isoformat()}
    assert other_org.api.get("/memory/search", params).status_code == 404
    assert api_client_with(None).get("/memory/search", params).status_code == 401
    assert api_client_with("mxk_bad_key").get("/memory/search", params).status_code == 401
    # Other memory types are searched as without it: current ones.
    everything = org.api.get("/memory/search", params | {"memory_type": "all"}).json()
    assert {result["memory_type"] for result in everything["results"]} >= {"semantic"}


# --- The rule, on facts alone ------------------------------------------------------------------


def _stated(predicate: str, value: str, at: int, subject: str = "user") -> Stated[str]:
    return Stated(f"{predicate}:{value}@{at}", subject, predicate, value, day(at))


@pytest.mark.parametrize(
    ("older", "newer", "expected"),
    [
        (("lives_in", "Paris"), ("moved_to", "Berlin"), True),
        (("moved_to", "Berlin"), ("moved_to", "Rome"), True),
        (("moved_to", "Berlin"), ("lives_in", "Rome"), True),
        (("lives_in", "Paris"), ("lives_in", "paris"), False),
        (("name", "Priya"), ("name", "Sam"), True),
        (("partner", "girlfriend: Ana"), ("partner", "wife: Ana"), True),
        (("diet", "vegetarian"), ("diet", "vegan"), True),
        (("diet", "vegan"), ("diet", "gluten free"), False),
        (("uses", "Postgres"), ("switched_to", "Postgres -> SQLite"), True),
        (("uses", "MySQL"), ("switched_to", "Postgres -> SQLite"), False),
        (("uses", "Postgres"), ("switched_to", "SQLite"), False),
        (("switched_to", "MySQL -> Postgres"), ("switched_to", "Postgres -> SQLite"), True),
        (("prefers", "tea over coffee"), ("switched_to", "tea -> coffee"), True),
        (("uses", "Vim"), ("no_longer", "using Vim"), True),
        (("likes", "hiking"), ("no_longer", "love hiking"), True),
        (("has_pet", "dog: Rex"), ("no_longer", "have a dog"), True),
        (("diet", "vegan"), ("no_longer", "vegan"), True),
        (("lives_in", "Rome"), ("no_longer", "live in Rome"), True),
        (("likes", "meat"), ("no_longer", "eat meat"), False),
        (("moved_to", "Rome"), ("no_longer", "live in Rome"), True),
        (("switched_to", "MySQL -> Postgres"), ("no_longer", "using Postgres"), True),
        # Said again after a "no longer": what it stopped holds again.
        (("no_longer", "Postgres"), ("uses", "Postgres"), True),
        (("no_longer", "using Vim"), ("uses", "Vim"), True),
        (("no_longer", "play chess"), ("hobby", "chess"), True),
        (("no_longer", "have a dog"), ("has_pet", "dog: Rex"), True),
        (("no_longer", "vegan"), ("diet", "vegan"), True),
        (("no_longer", "live in Rome"), ("moved_to", "Rome"), True),
        (("no_longer", "work at Google"), ("works_at", "Google"), True),
        (("no_longer", "Postgres"), ("switched_to", "MySQL -> Postgres"), True),
        (("no_longer", "Postgres"), ("switched_to", "Postgres -> MySQL"), False),
        (("no_longer", "Postgres"), ("uses", "Redis"), False),
        (("no_longer", "eat meat"), ("likes", "meat"), False),
        (("no_longer", "Postgres"), ("no_longer", "Postgres"), False),
        (("no_longer", "Postgres"), ("owns", "Postgres"), False),
        (("likes", "tea"), ("likes", "coffee"), False),
        (("from", "Spain"), ("from", "Spanish"), False),
    ],
)
def test_which_later_fact_contradicts_which(
    older: tuple[str, str], newer: tuple[str, str], expected: bool
) -> None:
    assert contradicts(newer=_stated(*newer, 2), older=_stated(*older, 1)) is expected
    # Never backwards in time, never at the same moment, never across subjects.
    assert contradicts(newer=_stated(*newer, 1), older=_stated(*older, 2)) is False
    assert contradicts(newer=_stated(*newer, 1), older=_stated(*older, 1)) is False
    assert contradicts(newer=_stated(*newer, 2, "Ana (sister)"), older=_stated(*older, 1)) is False


def test_a_fact_is_ended_by_the_earliest_later_fact() -> None:
    paris = _stated("lives_in", "Paris", 1)
    berlin = _stated("moved_to", "Berlin", 5)
    rome = _stated("moved_to", "Rome", 9)
    assert contradictions_find([rome, paris, berlin]) == [
        (paris.item, berlin.item),
        (berlin.item, rome.item),
    ]
