"""Per-item history: every change of a memory or an experience, from the API, the admin or a
learning run, with its values before and after and who made it; a change of nothing records
nothing; a forgotten user's history goes with them (tests/accounts/test_forget.py)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings

from accounts.services import client_read_scopes_set
from memory.models import EpisodicMemory
from skills.models import Experience, LearningRun
from skills.tasks import learning_run_task
from tests.factories import TenantFixture, memories_create
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
