"""/learning-runs: a client reads its runs (and those of clients it has read scopes on),
queues one now, and retries one that stopped short; another tenant's run is not found."""

from __future__ import annotations

from accounts.services import client_read_scopes_set
from skills.models import LearningRun
from tests.factories import TenantFixture, learning_run_create
from tests.skills.test_learning_trigger import _close, _open


def test_runs_are_listed_and_read_with_their_sessions(org: TenantFixture) -> None:
    run = learning_run_create(org, user_id="agent-user")
    listed = org.api.get("/learning-runs", {"user_id": "agent-user"}).json()["results"]
    assert [item["id"] for item in listed] == [str(run.pk)]
    detail = org.api.get(f"/learning-runs/{run.pk}").json()
    assert detail["state"] == "queued" and detail["trigger"] == "threshold"
    assert detail["user_id"] == "agent-user"
    assert detail["session_ids"] == [f"task-agent-user-{index}" for index in range(5)]
    assert org.api.get("/learning-runs").json()["results"][0]["id"] == str(run.pk)


def test_a_run_is_queued_on_request_below_the_threshold(org: TenantFixture) -> None:
    for name in ("a", "b", "open"):
        _open(org.api, name)
    _close(org.api, "a")
    _close(org.api, "b")
    first = org.api.post("/learning-runs", {"user_id": "agent-user"}, format="json")
    assert first.status_code == 201, first.content
    assert first.json()["trigger"] == "request"
    assert first.json()["session_ids"] == ["a", "b"]  # the open session is not learned yet
    again = org.api.post("/learning-runs", {"user_id": "agent-user"}, format="json")
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert LearningRun.objects.count() == 1


def test_nothing_to_learn_from_is_a_conflict(org: TenantFixture) -> None:
    _open(org.api, "still-open")
    response = org.api.post("/learning-runs", {"user_id": "agent-user"}, format="json")
    assert response.status_code == 409
    assert response.json()["code"] == "nothing_to_learn"
    assert not LearningRun.objects.exists()


def test_only_a_run_that_stopped_short_is_retried(org: TenantFixture) -> None:
    run = learning_run_create(org, user_id="agent-user")
    queued = org.api.post(f"/learning-runs/{run.pk}/retry")
    assert queued.status_code == 409 and queued.json()["code"] == "not_retryable"
    LearningRun.objects.filter(pk=run.pk).update(state="failed", error="the LLM was down")
    retried = org.api.post(f"/learning-runs/{run.pk}/retry")
    assert retried.status_code == 200, retried.content
    assert retried.json()["state"] == "queued" and retried.json()["error"] == ""
    assert retried.json()["session_ids"] == [f"task-agent-user-{index}" for index in range(5)]
    LearningRun.objects.filter(pk=run.pk).update(state="succeeded")
    assert org.api.post(f"/learning-runs/{run.pk}/retry").status_code == 409


def test_another_clients_run_is_read_with_a_scope_and_never_retried(org: TenantFixture) -> None:
    run = learning_run_create(org, user_id="agent-user")
    LearningRun.objects.filter(pk=run.pk).update(state="failed")
    second = org.another_client("second")
    assert second.api.get(f"/learning-runs/{run.pk}").status_code == 404
    assert second.api.post(f"/learning-runs/{run.pk}/retry").status_code == 404
    client_read_scopes_set(client=second.client, scopes=[org.client])
    assert second.api.get(f"/learning-runs/{run.pk}").status_code == 200
    # Read-only in every sense: retrying answers as for a missing run.
    assert second.api.post(f"/learning-runs/{run.pk}/retry").status_code == 404
    assert LearningRun.objects.get(pk=run.pk).state == "failed"
