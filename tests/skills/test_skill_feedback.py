"""Skills prove themselves: the task sessions a skill was retrieved for count their outcomes
when they close. Three that fail lower its confidence and flag it for review; three that
succeed raise it and make the candidate active."""

from __future__ import annotations

from skills.models import Skill, SkillUse
from tests.factories import TenantFixture, api_client_with
from tests.skills.sessions import NEW_TASK, session_send, tool_turns


def _use(org: TenantFixture, session_id: str, *, works: bool, capture) -> None:
    result = "Loaded 80 rows." if works else "Error: no such file or directory: q3.csv"
    verdict = "Perfect, thanks, that works." if works else "That didn't work, it still fails."
    session_send(
        org.api,
        session_id,
        [
            {"role": "user", "content": NEW_TASK},
            *tool_turns("read_csv_latin1", {"path": "q3.csv"}, result, "call-1"),
            {"role": "assistant", "content": "I read q3.csv with latin-1."},
        ],
        close=False,
    )
    found = org.api.post(
        "/skills/retrieve",
        {"user_id": "agent-user", "task": NEW_TASK, "session_id": session_id},
        format="json",
    ).json()
    assert found["count"] >= 1
    with capture(execute=True):
        session_send(org.api, session_id, [{"role": "user", "content": verdict}])


def _confidence(org: TenantFixture, skill: Skill) -> float:
    return org.api.get(f"/skills/{skill.pk}").json()["confidence"]


def test_sessions_that_fail_lower_it_and_flag_it(
    org: TenantFixture, learned: Skill, django_capture_on_commit_callbacks
) -> None:
    before = _confidence(org, learned)
    for index in range(3):
        _use(org, f"later-{index}", works=False, capture=django_capture_on_commit_callbacks)
    learned.refresh_from_db()
    assert (learned.successes, learned.failures) == (0, 3)
    assert learned.needs_review and "3 failed" in learned.review_reason
    assert learned.status == "candidate"
    assert _confidence(org, learned) < before
    assert SkillUse.objects.filter(skill=learned, counted_at__isnull=False).count() == 3


def test_sessions_that_succeed_raise_it_and_make_it_active(
    org: TenantFixture, learned: Skill, django_capture_on_commit_callbacks
) -> None:
    before = _confidence(org, learned)
    for index in range(3):
        _use(org, f"later-{index}", works=True, capture=django_capture_on_commit_callbacks)
    learned.refresh_from_db()
    assert (learned.successes, learned.failures) == (3, 0)
    assert learned.status == "active" and not learned.needs_review
    assert _confidence(org, learned) > before
    top = org.api.post(
        "/skills/retrieve", {"user_id": "agent-user", "task": NEW_TASK}, format="json"
    ).json()["skills"][0]
    assert top["status"] == "active" and "not yet proven" not in top["why"]


def test_a_session_counts_once(
    org: TenantFixture, learned: Skill, django_capture_on_commit_callbacks
) -> None:
    _use(org, "later-0", works=True, capture=django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        closed = org.api.post("/sessions/later-0/close", {"user_id": "agent-user"}, format="json")
    assert closed.status_code == 200
    learned.refresh_from_db()
    assert learned.successes == 1


def test_a_read_only_key_retrieves_but_does_not_link_a_session(
    org: TenantFixture, learned: Skill
) -> None:
    session_send(org.api, "later-0", [{"role": "user", "content": NEW_TASK}], close=False)
    _, key = org.new_key(read_only=True)
    reader = api_client_with(key)
    asked = {"user_id": "agent-user", "task": NEW_TASK}
    assert reader.post("/skills/retrieve", asked, format="json").json()["count"] >= 1
    linked = reader.post("/skills/retrieve", {**asked, "session_id": "later-0"}, format="json")
    assert linked.status_code == 403 and linked.json()["code"] == "read_only_key"
    assert "session_id" in linked.json()["detail"]
    assert not SkillUse.objects.exists()


def test_the_outcome_the_agent_states_is_what_the_skill_counts(
    org: TenantFixture, learned: Skill, django_capture_on_commit_callbacks
) -> None:
    # Every call worked and no user judged it: the turns alone would count a success.
    session_send(
        org.api,
        "stated-0",
        [
            {"role": "user", "content": NEW_TASK},
            *tool_turns("read_csv_latin1", {"path": "q3.csv"}, "Loaded 80 rows.", "call-1"),
            {"role": "assistant", "content": "I read q3.csv with latin-1."},
        ],
        close=False,
    )
    linked = org.api.post(
        "/skills/retrieve",
        {"user_id": "agent-user", "task": NEW_TASK, "session_id": "stated-0"},
        format="json",
    )
    assert linked.json()["count"] >= 1
    with django_capture_on_commit_callbacks(execute=True):
        closed = org.api.post(
            "/sessions/stated-0/close",
            {"user_id": "agent-user", "outcome": "failure", "note": "Only 80 of 95 rows."},
            format="json",
        )
    assert closed.status_code == 200, closed.content
    learned.refresh_from_db()
    assert (learned.successes, learned.failures) == (0, 1)
