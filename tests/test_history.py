"""Per-item history: every change of a memory or an experience, from the API, the admin or a
learning run, with its values before and after and who made it; a change of nothing records
nothing; a forgotten user's history goes with them (tests/accounts/test_forget.py)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import override_settings
from pghistory import runtime as pghistory_runtime

from accounts.services import client_read_scopes_set
from memory.models import EpisodicMemory
from mirix_site.common.history import tracked_models
from skills.models import Experience, LearningRun
from skills.tasks import learning_run_task
from tests.factories import TenantFixture, chat_turns, memories_create
from tests.skills.sessions import CSV_TASKS, csv_session, session_send


@pytest.fixture
def operator(client, db):
    user = get_user_model().objects.create_superuser("operator", "op@example.com", "pw")
    client.force_login(user)
    return client


def test_an_api_edit_is_one_entry_with_its_key_and_values(org: TenantFixture) -> None:
    memories_create(org, user_id="sam")
    episode = EpisodicMemory.objects.get(client=org.client)
    url = f"/memory/episodic/{episode.pk}"
    assert org.api.get(f"{url}/history").json() == {
        "id": str(episode.pk),
        "memory_type": "episodic",
        "history": [],
    }
    before = episode.summary
    assert org.api.patch(url, {"summary": "Moved to Tuesday"}, format="json").status_code == 200
    # The same value again changes nothing, and records nothing.
    assert org.api.patch(url, {"summary": "Moved to Tuesday"}, format="json").status_code == 200

    [entry] = org.api.get(f"{url}/history").json()["history"]
    assert entry["actor"] == "api"
    assert (entry["client_id"], entry["key_id"]) == (org.client.pk, org.api_key.key_id)
    assert entry["changes"] == {"summary": {"before": before, "after": "Moved to Tuesday"}}
    assert entry["at"]

    # A client that reads it through a read scope sees who changed it, not with which key.
    sibling = org.another_client("reader")
    client_read_scopes_set(client=sibling.client, scopes=[org.client])
    [seen] = sibling.api.get(f"{url}/history").json()["history"]
    assert (seen["client_id"], seen["key_id"]) == (org.client.pk, None)


def test_an_admin_edit_is_the_operators_and_a_no_op_save_records_nothing(
    operator, org: TenantFixture
) -> None:
    memories_create(org, user_id="sam")
    episode = EpisodicMemory.objects.get(client=org.client)
    url = f"/admin/memory/episodicmemory/{episode.pk}/change/"
    form = {
        "event_type": episode.event_type,
        "summary": episode.summary,
        "details": episode.details.replace("\n", "\r\n"),
        "actor": episode.actor,
        "occurred_at_0": episode.occurred_at.strftime("%Y-%m-%d"),
        "occurred_at_1": episode.occurred_at.strftime("%H:%M:%S"),
        "superseded_by": "",
    }
    operator.post(url, form)
    assert not episode.history.exists()

    operator.post(url, form | {"summary": "Corrected by hand"})
    [entry] = org.api.get(f"/memory/episodic/{episode.pk}/history").json()["history"]
    assert entry["actor"] == "operator" and entry["key_id"] is None
    assert entry["changes"]["summary"]["after"] == "Corrected by hand"
    page = operator.get(url).content.decode()
    assert "Corrected by hand" in page and ">operator<" in page  # the operator's username


@override_settings(LLM_PROVIDER="none")
def test_a_learning_run_changes_are_the_curators(
    org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        for index, task in enumerate(CSV_TASKS[:5]):
            session_send(org.api, f"csv-{index}", csv_session(task))
    run = LearningRun.objects.get()
    assert learning_run_task.apply(args=[run.pk]).get() == "succeeded"

    lesson = Experience.objects.filter(distilled_by=run).first()
    entries = org.api.get(f"/experiences/{lesson.pk}/history").json()["history"]
    consumed = [entry for entry in entries if "status" in entry["changes"]]
    assert consumed, entries
    assert consumed[-1]["actor"] == "curator"
    assert consumed[-1]["run_id"] == str(run.pk)
    assert consumed[-1]["changes"]["status"]["after"] == "consumed"
    assert consumed[-1]["changes"]["consumed_by"] == {"before": None, "after": str(run.pk)}


def test_a_vault_items_secret_is_not_kept_in_its_history(org: TenantFixture) -> None:
    from memory.models import KnowledgeVaultItem

    memories_create(org, user_id="sam")
    item = KnowledgeVaultItem.objects.get(client=org.client)
    url = f"/memory/knowledge_vault/{item.pk}"
    org.api.patch(url, {"secret_value": "new@example.com"}, format="json")
    assert org.api.get(f"{url}/history").json()["history"] == []
    org.api.patch(url, {"caption": "work e-mail"}, format="json")
    [entry] = org.api.get(f"{url}/history").json()["history"]
    assert list(entry["changes"]) == ["caption"]
    from mirix_site.common.history import tracked_fields

    assert "secret_value_encrypted" not in tracked_fields(KnowledgeVaultItem)


def test_an_add_changes_no_tracked_row_and_sets_no_history_context(org: TenantFixture) -> None:
    """``/memory/add`` runs without a history context (``MemoryAddApi.history``): it must never
    change a tracked row, whatever the user already has stored."""
    memories_create(org, user_id="sam")
    events = [model.history.rel.related_model for model in tracked_models()]
    before = {event: event.objects.count() for event in events}
    adds = [
        {"messages": chat_turns("I moved to Lisbon.", "Noted.")},
        {"session_id": "trip", "messages": chat_turns("We fly on Friday.", "Good.")},
        {"session_id": "trip", "messages": chat_turns("Hotel booked.", "Great.")},
        {
            "session_id": "deploy",
            "session_tag": "task",
            "messages": [{"role": "user", "content": "deploy", "client_message_id": "t1"}],
        },
        {  # a retry of a turn stored before
            "session_id": "deploy",
            "messages": [{"role": "user", "content": "deploy", "client_message_id": "t1"}],
        },
    ]
    in_context: list[bool] = []

    def statement_seen(execute, sql, params, many, context):
        # pghistory's context is active while its thread-local tracker holds a value.
        in_context.append(hasattr(pghistory_runtime._tracker, "value"))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(statement_seen):
        for body in adds:
            response = org.api.post("/memory/add", {"user_id": "sam", **body}, format="json")
            assert response.status_code == 202, response.content
    assert {event: event.objects.count() for event in events} == before
    assert in_context and not any(in_context)
