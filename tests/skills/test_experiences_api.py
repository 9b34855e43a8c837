"""The experience endpoints: record (single, batch, failure, transcript), recall, recent, one by
id, supersede, delete, stats."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from mirix_site.search.models import Posting
from mirix_site.search.spaces import write_embedders
from skills.embedding_queue import experiences_embed, experiences_unembedded
from skills.models import Experience
from skills.search import EXPERIENCE_KIND
from skills.services.grouping import action_key
from tests.factories import TenantFixture, tenant_fixture
from tests.skills.experiences import aged, embed_all, record, record_many


def recall(owner: TenantFixture, query: str, **params: object) -> list[dict]:
    response = owner.api.get("/experiences/recall", {"user_id": "ada", "query": query, **params})
    assert response.status_code == 200, response.json()
    return response.json()["results"]


def test_a_recorded_experience_is_stored_and_found_by_its_words_at_once(
    org: TenantFixture,
) -> None:
    made = record(
        org,
        task="Fix the login timeout",
        action="Added a Redis cache in front of session lookups",
        outcome="success",
        score=0.9,
        context={"service": "auth"},
    )
    assert made["outcome"] == "success" and made["score"] == 0.9
    assert made["origin"] == "api" and made["superseded_by"] is None
    assert made["memory_type"] == "experience" and made["user_id"] == "ada"
    row = Experience.objects.get(pk=int(made["id"]))
    assert row.action_key == action_key("add redis cache in front of session lookup")
    assert Posting.objects.filter(kind=EXPERIENCE_KIND.code, document_id=row.pk).exists()
    # Before the worker embeds it, BM25 finds it; the vector lane does not yet.
    [found] = recall(org, "login timeout")
    assert found["id"] == made["id"] and found["ranks"]["bm25"] == 1
    assert found["ranks"]["embedding"] is None


def test_an_embedded_experience_is_found_by_meaning(org: TenantFixture) -> None:
    record_many(
        org,
        [
            {
                "task": "Fix the login timeout",
                "action": "Added a Redis cache",
                "outcome": "success",
            },
            {
                "task": "Bake bread for the party",
                "action": "Proofed it overnight",
                "outcome": "success",
            },
        ],
    )
    found = recall(org, "users cannot sign in, authentication is slow", search_method="embedding")
    assert found[0]["task"] == "Fix the login timeout"
    assert found[0]["ranks"]["embedding"] == 1


def test_the_score_defaults_to_the_outcome_and_a_contradicting_one_is_kept_with_a_warning(
    org: TenantFixture,
) -> None:
    assert record(org, task="t", action="a", outcome="partial")["score"] == 0.5
    assert record(org, task="t", action="a", outcome="failure")["score"] == 0.0
    response = org.api.post(
        "/experiences",
        {"user_id": "ada", "task": "t", "action": "a", "outcome": "success", "score": 0.1},
        format="json",
    )
    assert response.status_code == 201
    body = response.json()
    assert body["experience"]["score"] == 0.1
    assert body["warnings"] == ["score 0.1 is low for a success; stored as sent"]


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"outcome": "maybe"}, "outcome"),
        ({"score": 1.5}, "score"),
        ({"score": "high"}, "score"),
        ({"task": "  "}, "task"),
        ({"context": ["not", "an", "object"]}, "context"),
        ({"occurred_at": "2999-01-01T00:00:00Z"}, "occurred_at"),
        ({"supersedes": "12x"}, "supersedes"),
    ],
)
def test_bad_input_is_refused_with_the_field_named(
    org: TenantFixture, fields: dict, error: str
) -> None:
    body = {"user_id": "ada", "task": "t", "action": "a", "outcome": "success", **fields}
    response = org.api.post("/experiences", body, format="json")
    assert response.status_code == 422, response.json()
    assert error in response.json()["fields"]
    assert not Experience.objects.exists()


def test_a_batch_is_stored_whole_or_not_at_all(org: TenantFixture) -> None:
    items = [{"task": f"task {i}", "action": "act", "outcome": "success"} for i in range(5)]
    bad = [*items[:3], {"task": "x", "action": "y", "outcome": "maybe"}, *items[3:]]
    response = org.api.post("/experiences", {"user_id": "ada", "experiences": bad}, format="json")
    assert response.status_code == 422
    assert list(response.json()["fields"]) == ["experiences.3.outcome"]
    assert not Experience.objects.exists()
    response = org.api.post("/experiences", {"user_id": "ada", "experiences": items}, format="json")
    assert response.status_code == 201
    assert response.json()["count"] == 5
    assert Experience.objects.count() == 5
    too_many = {"user_id": "ada", "experiences": [items[0]] * 1001}
    assert org.api.post("/experiences", too_many, format="json").status_code == 422


@pytest.mark.parametrize("field", ["supersedes", "recommendation_id"])
def test_a_reference_to_nothing_of_the_user_is_404_and_stores_nothing(
    org: TenantFixture, other_org: TenantFixture, field: str
) -> None:
    foreign = record(other_org, task="t", action="a", outcome="success")
    for missing in ("424242", foreign["id"]):
        items = [
            {"task": "a", "action": "b", "outcome": "success"},
            {"task": "c", "action": "d", "outcome": "success", field: missing},
        ]
        body = {"user_id": "ada", "experiences": items}
        response = org.api.post("/experiences", body, format="json")
        # Like any row the caller cannot see, missing and another tenant's alike.
        assert response.status_code == 404
        assert response.json() == {"detail": "Not found.", "code": "not_found"}
    assert Experience.objects.filter(client=org.client).count() == 0


def test_a_failure_is_recorded_with_its_reason_and_recalled_as_one(org: TenantFixture) -> None:
    response = org.api.post(
        "/experiences/failure",
        {
            "user_id": "ada",
            "task": "Throttle abusive clients",
            "action": "Added a fixed-window rate limiter",
            "reason": "WebSocket traffic was not handled; the limiter only saw HTTP",
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    failure = response.json()["experience"]
    assert failure["outcome"] == "failure" and failure["score"] == 0.0
    record(
        org, task="Throttle abusive clients", action="Token bucket per tenant", outcome="success"
    )
    embed_all()
    # The reason is searched too.
    found = recall(org, "websocket traffic", outcome="failure")
    assert [item["id"] for item in found] == [failure["id"]]
    missing_reason = {"user_id": "ada", "task": "t", "action": "a"}
    response = org.api.post("/experiences/failure", missing_reason, format="json")
    assert response.status_code == 422 and "reason" in response.json()["fields"]


def test_recall_filters_on_context_values(org: TenantFixture) -> None:
    record_many(
        org,
        [
            {
                "task": "deploy the api",
                "action": "blue green",
                "outcome": "success",
                "context": {"env": "prod", "retries": 3, "team": {"name": "core"}},
            },
            {
                "task": "deploy the api",
                "action": "rolling",
                "outcome": "success",
                "context": {"env": "staging", "retries": "3"},
            },
        ],
    )
    assert [r["action"] for r in recall(org, "deploy", **{"context.env": "prod"})] == ["blue green"]
    # A number matches as the number it spells and as text.
    both = recall(org, "deploy", **{"context.retries": "3"})
    assert sorted(r["action"] for r in both) == ["blue green", "rolling"]
    assert [r["action"] for r in recall(org, "deploy", **{"context.team.name": "core"})] == [
        "blue green"
    ]
    assert recall(org, "deploy", **{"context.env": "dev"}) == []
    response = org.api.get(
        "/experiences/recall", {"user_id": "ada", "query": "deploy", "context.": "x"}
    )
    assert response.status_code == 422


def test_superseded_experiences_leave_recall_but_stay_readable(org: TenantFixture) -> None:
    old = record(org, task="speed up the reports", action="nightly cache warmup", outcome="success")
    new = record(
        org,
        task="speed up the reports",
        action="materialized view",
        outcome="success",
        supersedes=old["id"],
    )
    embed_all()
    assert [r["id"] for r in recall(org, "reports")] == [new["id"]]
    assert sorted(r["id"] for r in recall(org, "reports", include_superseded="true")) == sorted(
        [old["id"], new["id"]]
    )
    shown = org.api.get(f"/experiences/{old['id']}").json()
    assert shown["superseded_by"] == new["id"]


def test_supersede_checks_its_target(org: TenantFixture, other_org: TenantFixture) -> None:
    first = record(org, task="t", action="a", outcome="success")
    second = record(org, task="t", action="b", outcome="success")
    other_user = record(org, user_id="bea", task="t", action="c", outcome="success")
    foreign = record(other_org, task="t", action="d", outcome="success")

    def supersede(target: str, by: str, **body: str):
        return org.api.post(f"/experiences/{target}/supersede", {"by": by, **body}, format="json")

    assert supersede("424242", second["id"]).status_code == 404
    assert supersede(foreign["id"], second["id"]).status_code == 404
    # A body's reference the caller cannot see answers as a missing path object does.
    for by in ("424242", foreign["id"], other_user["id"]):
        response = supersede(first["id"], by)
        assert response.status_code == 404, by
        assert response.json() == {"detail": "Not found.", "code": "not_found"}
    assert supersede(first["id"], first["id"]).status_code == 409
    assert supersede(first["id"], second["id"]).status_code == 200
    # second superseding first, first superseding second: a cycle.
    response = supersede(second["id"], first["id"])
    assert response.status_code == 409 and "cycle" in response.json()["detail"]
    assert Experience.objects.get(pk=int(second["id"])).superseded_by is None


def test_delete_takes_it_out_of_recall_and_revives_what_it_replaced(org: TenantFixture) -> None:
    old = record(org, task="reports", action="cache", outcome="success")
    new = record(org, task="reports", action="view", outcome="success", supersedes=old["id"])
    response = org.api.delete(f"/experiences/{new['id']}")
    assert response.status_code == 200 and response.json() == {"success": True, "id": new["id"]}
    assert not Posting.objects.filter(
        kind=EXPERIENCE_KIND.code, document_id=int(new["id"])
    ).exists()
    assert [r["id"] for r in recall(org, "reports")] == [old["id"]]
    assert org.api.get(f"/experiences/{new['id']}").status_code == 404


def test_a_sibling_clients_experience_is_readable_but_not_writable(org: TenantFixture) -> None:
    from accounts.services import client_read_scopes_set

    sibling = org.another_client("alice-sibling")
    theirs = record(sibling, task="reports", action="cache", outcome="success")
    mine = record(org, task="reports", action="view", outcome="success")
    client_read_scopes_set(client=org.client, scopes=[sibling.client])
    assert org.api.get(f"/experiences/{theirs['id']}").status_code == 200
    # Read-only in every sense: each write answers as it does for a missing experience.
    missing = "999999999"

    def writes(target: str) -> list[tuple[int, dict]]:
        answers = [
            org.api.post(f"/experiences/{target}/supersede", {"by": mine["id"]}, format="json"),
            org.api.post(f"/experiences/{mine['id']}/supersede", {"by": target}, format="json"),
            org.api.post(
                "/experiences",
                {
                    "user_id": "ada",
                    "task": "r",
                    "action": "x",
                    "outcome": "success",
                    "supersedes": target,
                },
                format="json",
            ),
            org.api.delete(f"/experiences/{target}"),
        ]
        return [(answer.status_code, answer.json()) for answer in answers]

    assert writes(theirs["id"]) == writes(missing)
    assert [status for status, _ in writes(missing)] == [404, 404, 404, 404]
    assert org.api.get(f"/experiences/{theirs['id']}").json()["superseded_by"] is None
    assert org.api.get(f"/experiences/{mine['id']}").json()["superseded_by"] is None


def test_recent_lists_newest_first_in_pages(org: TenantFixture) -> None:
    made = [record(org, task=f"task {i}", action="a", outcome="success") for i in range(5)]
    record(org, task="failed", action="b", outcome="failure")
    page = org.api.get("/experiences/recent", {"user_id": "ada", "limit": 3}).json()
    assert [item["task"] for item in page["results"]] == ["failed", "task 4", "task 3"]
    rest = org.api.get(
        "/experiences/recent", {"user_id": "ada", "limit": 3, "cursor": page["next_cursor"]}
    ).json()
    assert [item["id"] for item in rest["results"]] == [m["id"] for m in made[2::-1]]
    failures = org.api.get("/experiences/recent", {"user_id": "ada", "outcome": "failure"}).json()
    assert [item["task"] for item in failures["results"]] == ["failed"]


def test_an_imported_history_keeps_its_dates(org: TenantFixture) -> None:
    made = record(org, task="t", action="a", outcome="success", occurred_at=aged(40))
    occurred = Experience.objects.get(pk=int(made["id"])).occurred_at
    assert timezone.now() - occurred > timedelta(days=39)


def test_half_life_reorders_recall_but_keeps_every_result(org: TenantFixture) -> None:
    record_many(
        org,
        [
            {
                "task": "scale the service under load",
                "action": "manual scaling",
                "outcome": "success",
                "occurred_at": aged(300),
            },
            {
                "task": "scale the service under load",
                "action": "autoscaling",
                "outcome": "success",
                "occurred_at": aged(2),
            },
        ],
    )
    plain = recall(org, "scale the service under load", search_method="bm25")
    decayed = recall(org, "scale the service under load", search_method="bm25", half_life_days=30)
    assert sorted(r["id"] for r in plain) == sorted(r["id"] for r in decayed)
    assert decayed[0]["action"] == "autoscaling"
    assert decayed[0]["search_score"] > decayed[1]["search_score"]


def test_a_transcript_becomes_one_experience_and_sending_it_again_replaces_it(
    org: TenantFixture,
) -> None:
    messages = [
        {"role": "user", "content": "The nightly export job times out. Can you fix it?"},
        {
            "role": "assistant",
            "content": "I split the export into batches of 10,000 rows. It now runs in 4 minutes.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "edit_file", "arguments": "{}"},
                }
            ],
        },
        {"role": "user", "content": "Perfect, that worked, thanks!"},
    ]
    body = {"user_id": "ada", "messages": messages}
    response = org.api.post("/experiences/conversation", body, format="json")
    assert response.status_code == 201, response.json()
    made = response.json()["experience"]
    assert made["task"] == "The nightly export job times out."
    assert made["action"] == "I split the export into batches of 10,000 rows. (called edit_file)"
    assert made["outcome"] == "success" and made["origin"] == "conversation"
    # The same transcript again, now with the ground truth: replaced, not added.
    again = org.api.post("/experiences/conversation", body | {"outcome": "partial"}, format="json")
    assert again.status_code == 200 and again.json()["replaced"] is True
    assert again.json()["experience"]["id"] == made["id"]
    assert again.json()["experience"]["outcome"] == "partial"
    assert Experience.objects.count() == 1


def test_a_transcript_that_does_not_say_how_it_went_needs_the_outcome(
    org: TenantFixture,
) -> None:
    messages = [
        {"role": "user", "content": "Rename the column"},
        {"role": "assistant", "content": "Renamed it in a migration."},
    ]
    response = org.api.post(
        "/experiences/conversation", {"user_id": "ada", "messages": messages}, format="json"
    )
    assert response.status_code == 422 and "outcome" in response.json()["fields"]
    response = org.api.post(
        "/experiences/conversation",
        {"user_id": "ada", "messages": [{"role": "assistant", "content": "hello"}]},
        format="json",
    )
    assert response.status_code == 422 and "messages" in response.json()["fields"]
    assert not Experience.objects.exists()


def test_a_closing_complaint_is_a_failure(org: TenantFixture) -> None:
    messages = [
        {"role": "user", "content": "Make the build pass"},
        {"role": "assistant", "content": "I pinned numpy to 1.26."},
        {"role": "user", "content": "Thanks, but it still fails with the same error."},
    ]
    response = org.api.post(
        "/experiences/conversation", {"user_id": "ada", "messages": messages}, format="json"
    )
    assert response.json()["experience"]["outcome"] == "failure"


def test_stats_count_the_users_experiences(org: TenantFixture) -> None:
    old = record(org, task="t", action="a", outcome="success")
    record(org, task="t", action="b", outcome="failure", supersedes=old["id"])
    record(org, task="t", action="c", outcome="partial")
    record(org, user_id="bea", task="t", action="d", outcome="success")
    stats = org.api.get("/experiences/stats", {"user_id": "ada"}).json()
    assert stats["total"] == 3 and stats["current"] == 2 and stats["superseded"] == 1
    assert stats["by_outcome"] == {"success": 1, "failure": 1, "partial": 1}
    assert stats["by_origin"]["api"] == 3
    assert stats["embedding_pending"] == 3
    embed_all()
    assert org.api.get("/experiences/stats", {"user_id": "ada"}).json()["embedding_pending"] == 0


def test_the_sweep_takes_what_the_queue_lost_not_what_it_still_holds(org: TenantFixture) -> None:
    old = record(org, task="t", action="a", outcome="success")
    young = record(org, task="t", action="b", outcome="success")
    Experience.objects.filter(pk=int(old["id"])).update(
        created_at=timezone.now() - timedelta(minutes=10)
    )
    pending = experiences_unembedded(
        model=write_embedders()[0].model_name, limit=100, older_than=timedelta(minutes=2)
    )
    assert pending == [int(old["id"])]
    assert int(young["id"]) not in pending
    embed_all()
    assert not experiences_unembedded(
        model=write_embedders()[0].model_name, limit=100, older_than=timedelta(0)
    )


class _DeletingOneMidEmbed:
    """The write embedder, but its first call has a DELETE /experiences/{id} commit on another
    connection before it answers, as one landing while the worker embeds its batch."""

    def __init__(self, embedder: object, owner: TenantFixture, victim: int) -> None:
        self.embedder, self.owner, self.victim, self.calls = embedder, owner, victim, 0
        self.deleted: int | None = None  # the DELETE's status

    def __getattr__(self, name: str) -> object:
        return getattr(self.embedder, name)

    def _delete(self) -> None:
        try:
            response = self.owner.api.delete(f"/experiences/{self.victim}?user_id=ada")
            self.deleted = response.status_code
        finally:
            connection.close()

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        if self.calls == 1:
            deleting = threading.Thread(target=self._delete)
            deleting.start()
            deleting.join(30)
        return self.embedder.embed(texts)


@pytest.mark.django_db(transaction=True)
def test_an_experience_deleted_while_its_batch_embeds_leaves_the_others_embedded() -> None:
    owner = tenant_fixture("alice")
    made = [
        record(owner, task=f"Task {n}", action=f"Action {n}", outcome="success") for n in range(3)
    ]
    ids = [int(row["id"]) for row in made]
    embedder = _DeletingOneMidEmbed(write_embedders()[0], owner, victim=ids[1])
    # The write of the three vectors fails on the deleted row; the two others are written.
    assert experiences_embed(experience_ids=ids, embedders=[embedder]) == 2
    assert embedder.deleted == 200
    assert not Experience.objects.filter(pk=ids[1]).exists()
    embedded = EXPERIENCE_KIND.embedding_model.objects.values_list("experience_id", flat=True)
    assert sorted(embedded) == [ids[0], ids[2]]


def test_a_user_the_worker_takes_past_the_exact_scan_gets_an_index_at_once(
    worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not at beat's next sync (ten minutes): the embedding write that crosses the line
    queues one, once per debounce window, and the index is there when the worker is done."""
    from mirix_site.common.redis import redis_client
    from mirix_site.search import vectors
    from mirix_site.search.vector_indexes import (
        REQUEST_MARKER,
        index_exists,
        own_indexes_request,
        own_indexes_wanted,
    )
    from mirix_site.search.vectors import own_index_name

    monkeypatch.setattr(vectors, "EXACT_SCAN_MAX_ROWS", 3)
    redis_client().delete(REQUEST_MARKER)
    owner = tenant_fixture("alice")
    record(owner, user_id="small", task="Task small", action="Action", outcome="success")
    response = owner.api.post(
        "/experiences",
        {
            "user_id": "large",
            "experiences": [
                {"task": f"Task {n}", "action": f"Action {n}", "outcome": "success"}
                for n in range(5)
            ],
        },
        format="json",
    )
    assert response.status_code == 201
    large = Experience.objects.filter(end_user__user_id="large").first().end_user_id
    small = Experience.objects.filter(end_user__user_id="small").first().end_user_id
    model = write_embedders()[0].model_name
    name = own_index_name(EXPERIENCE_KIND, model, large)
    deadline = timezone.now() + timedelta(seconds=60)
    while not index_exists(name) and timezone.now() < deadline:
        threading.Event().wait(0.2)
    assert index_exists(name)
    assert own_indexes_wanted(EXPERIENCE_KIND, model, [large, small]) == []
    # Within the window a second crossing queues nothing; the marker was set by the first.
    assert redis_client().exists(REQUEST_MARKER)
    with connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX {name}")
    assert own_indexes_wanted(EXPERIENCE_KIND, model, [large]) == [large]
    assert own_indexes_request({(EXPERIENCE_KIND, model): {large}}) is False
    redis_client().delete(REQUEST_MARKER)
    assert own_indexes_request({(EXPERIENCE_KIND, model): {small}}) is False  # 1 row: not due


@pytest.mark.parametrize("spelling", ["0{}", "{}\u00a0", "{arabic}", "+{}", " {}"])
def test_an_id_has_one_spelling(org: TenantFixture, spelling: str) -> None:
    """ASCII digits without a leading zero: "017" or Arabic-Indic digits do not name row 17."""
    row = record(org, task="reports", action="cache", outcome="success")
    arabic = "".join(chr(0x0660 + int(digit)) for digit in row["id"])
    other = spelling.format(row["id"], arabic=arabic)
    assert org.api.get(f"/experiences/{row['id']}").status_code == 200
    for path in (f"/experiences/{other}", f"/skills/{other}", f"/learning-runs/{other}"):
        response = org.api.get(path)
        assert (response.status_code, response.json()["code"]) == (404, "not_found"), path


@pytest.mark.parametrize("value", ["1e309", "-1e400", "NaN", "Infinity"])
def test_a_context_filter_too_large_for_a_number_matches_as_text(
    org: TenantFixture, value: str
) -> None:
    row = org.api.post(
        "/experiences",
        {
            "user_id": "ada",
            "task": "reports",
            "action": "cache",
            "outcome": "success",
            "context": {"service": value},
        },
        format="json",
    )
    assert row.status_code == 201
    found = org.api.get(
        "/experiences/recall", {"user_id": "ada", "query": "reports", "context.service": value}
    )
    assert found.status_code == 200, found.content
    assert [item["id"] for item in found.json()["results"]] == [row.json()["experience"]["id"]]
