"""Skill learning's trigger: a user's closed task sessions no run has learned from queue one
learning run when they reach SKILL_TRIGGER_SESSION_THRESHOLD (5); chat sessions never count;
concurrent closes queue exactly one run."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from sessions.models import Session
from sessions.services import sessions_close_idle
from skills.models import LearningRun, LearningRunSession
from tests.factories import TenantFixture, tenant_fixture


def _open(api, session_id: str, *, tag: str = "task", user_id: str = "agent-user") -> None:
    response = api.post(
        "/memory/add",
        {
            "user_id": user_id,
            "session_id": session_id,
            "session_tag": tag,
            "messages": [
                {"role": "user", "content": f"task {session_id}: make the build pass"},
                {"role": "assistant", "content": "Ran the tests; fixed the import."},
            ],
        },
        format="json",
    )
    assert response.status_code == 202, response.content


def _close(api, session_id: str, *, user_id: str = "agent-user") -> None:
    response = api.post(f"/sessions/{session_id}/close", {"user_id": user_id}, format="json")
    assert response.status_code == 200, response.content


def _learned(run: LearningRun) -> set[str]:
    return {link.session.session_id for link in run.session_links.select_related("session").all()}


def test_five_closed_task_sessions_queue_a_run_four_do_not(
    org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    for index in range(6):
        _open(org.api, f"t{index}")
    with django_capture_on_commit_callbacks(execute=True):
        for index in range(4):
            _close(org.api, f"t{index}")
    assert not LearningRun.objects.exists()

    with django_capture_on_commit_callbacks(execute=True):
        _close(org.api, "t4")
    [run] = LearningRun.objects.all()
    assert run.state == "queued" and run.trigger == "threshold"
    assert (run.client, run.end_user.user_id) == (org.client, "agent-user")
    assert _learned(run) == {f"t{index}" for index in range(5)}

    # A session closed while the run waits joins it; no second run is queued.
    with django_capture_on_commit_callbacks(execute=True):
        _close(org.api, "t5")
    assert LearningRun.objects.count() == 1
    assert _learned(run) == {f"t{index}" for index in range(6)}


def test_chat_sessions_never_count(org: TenantFixture, django_capture_on_commit_callbacks) -> None:
    for index in range(5):
        _open(org.api, f"c{index}", tag="chat")
    for index in range(4):
        _open(org.api, f"t{index}")
    with django_capture_on_commit_callbacks(execute=True):
        for index in range(5):
            _close(org.api, f"c{index}")
        for index in range(4):
            _close(org.api, f"t{index}")
    assert not LearningRun.objects.exists()


def test_other_users_and_clients_sessions_do_not_count(
    org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    second = org.another_client("second")
    for index in range(3):
        _open(org.api, f"a{index}")
        _open(org.api, f"b{index}", user_id="someone-else")
        _open(second.api, f"s{index}")
    with django_capture_on_commit_callbacks(execute=True):
        for index in range(3):
            _close(org.api, f"a{index}")
            _close(org.api, f"b{index}", user_id="someone-else")
            _close(second.api, f"s{index}")
    assert not LearningRun.objects.exists()


def test_sessions_the_sweeper_closes_count_too(
    org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    for index in range(5):
        _open(org.api, f"idle{index}")
    Session.objects.update(last_activity_at=timezone.now() - timedelta(days=3))
    with django_capture_on_commit_callbacks(execute=True):
        assert sessions_close_idle(idle_for=timedelta(days=2)) == 5
    [run] = LearningRun.objects.all()
    assert len(_learned(run)) == 5


def test_a_learned_session_is_not_learned_again(
    org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    for index in range(9):
        _open(org.api, f"t{index}")
    with django_capture_on_commit_callbacks(execute=True):
        for index in range(5):
            _close(org.api, f"t{index}")
    first = LearningRun.objects.get()
    LearningRun.objects.filter(pk=first.pk).update(state="succeeded")  # as a finished run
    with django_capture_on_commit_callbacks(execute=True):
        for index in range(5, 9):
            _close(org.api, f"t{index}")
    assert LearningRun.objects.count() == 1  # four new ones: not yet
    assert LearningRunSession.objects.count() == 5


@pytest.mark.django_db(transaction=True)
def test_eight_threads_closing_at_once_queue_one_run() -> None:
    owner = tenant_fixture("alice")
    names = [f"t{index}" for index in range(8)]
    for name in names:
        _open(owner.api, name)
    start = threading.Barrier(len(names))
    failures: list[BaseException] = []

    def close(name: str) -> None:
        try:
            start.wait(10)
            _close(owner.api, name)
        except BaseException as error:  # reported below, not lost in the thread
            failures.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=close, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert not failures
    [run] = LearningRun.objects.all()
    assert _learned(run) == set(names)


def test_auto_dream_procedural_learns_from_the_last_sessions_and_a_dry_run_changes_nothing(
    org: TenantFixture,
) -> None:
    for index in range(3):
        _open(org.api, f"d{index}")
        _close(org.api, f"d{index}")
    path = "/memory/auto_dream?user_id=agent-user"
    dry = org.api.post(
        path, {"mode": "procedural", "dry_run": True, "last_n_sessions": 2}, format="json"
    )
    assert dry.status_code == 200, dry.content
    assert dry.json()["status"] == "would_queue" and dry.json()["session_ids"] == ["d1", "d2"]
    assert not LearningRun.objects.exists()
    queued = org.api.post(path, {"mode": "procedural", "last_n_sessions": 2}, format="json")
    assert queued.status_code == 202, queued.content
    [run] = LearningRun.objects.all()
    assert run.trigger == "auto_dream" and _learned(run) == {"d1", "d2"}
    assert queued.json()["run_id"] == str(run.pk)
    bad = org.api.post(path, {"mode": "lucid"}, format="json")
    assert bad.status_code == 422 and "mode" in bad.json()["fields"]
