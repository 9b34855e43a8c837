"""Learning runs end to end in the deterministic path (LLM_PROVIDER=none): task sessions with
a failing tool and a fix, closed, queue a run; the run distills them into lessons and curates
those into a versioned skill; a run claimed again redoes nothing."""

from __future__ import annotations

import json

from django.test import override_settings

from mirix_site.search.spaces import write_embedders
from sessions.models import Message
from skills.learning.execute import learning_run_execute
from skills.learning.runs import learning_run_claim
from skills.models import Experience, LearningRun, LearningRunSession, Skill, SkillVersion
from skills.prototypes import skill_phrasings
from skills.services import learning
from skills.tasks import learning_run_task
from tests.factories import TenantFixture
from tests.skills.sessions import CSV_TASKS, csv_session, session_send, tool_turns


def _learn(org: TenantFixture, tasks, capture) -> LearningRun:
    with capture(execute=True):
        for index, task in enumerate(tasks):
            session_send(org.api, f"csv-{index}", csv_session(task))
    run = LearningRun.objects.get()
    assert learning_run_task.apply(args=[run.pk]).get() == "succeeded"
    run.refresh_from_db()
    return run


@override_settings(LLM_PROVIDER="none")
def test_five_sessions_with_a_fix_become_one_skill(
    org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    run = _learn(org, CSV_TASKS[:5], django_capture_on_commit_callbacks)
    assert run.state == "succeeded" and run.attempts == 1
    assert run.experiences_distilled >= 5 and run.skills_created == 1
    lessons = Experience.objects.filter(distilled_by=run)
    assert {lesson.status for lesson in lessons} == {"consumed"}
    assert {lesson.origin for lesson in lessons} == {"distilled"}
    assert all(LearningRunSession.objects.filter(run=run).values_list("distilled_at", flat=True))
    [skill] = Skill.objects.all()
    assert skill.status == "candidate" and skill.version == 1
    assert skill.tools == ["read_csv_latin1"]
    assert "read_csv_latin1" in skill.instructions and "UnicodeDecodeError" in skill.instructions
    assert set(CSV_TASKS[:5]) <= set(skill.triggers)
    [version] = SkillVersion.objects.filter(skill=skill)
    assert version.author == "curator" and version.run == run
    assert set(version.experience_ids) == set(lessons.values_list("pk", flat=True))
    assert version.diff.startswith("--- v0\n+++ v1\n")
    assert skill.learned_successes == 5


@override_settings(LLM_PROVIDER="none")
def test_a_run_claimed_again_redoes_nothing(
    org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    run = _learn(org, CSV_TASKS[:5], django_capture_on_commit_callbacks)
    counts = (Experience.objects.count(), SkillVersion.objects.count())
    # As if its worker died before recording the end: the run is claimable again.
    LearningRun.objects.filter(pk=run.pk).update(state="running", heartbeat_at=None)
    LearningRun.objects.filter(pk=run.pk).update(heartbeat_at="2000-01-01T00:00:00Z")
    assert learning_run_task.apply(args=[run.pk]).get() == "succeeded"
    assert (Experience.objects.count(), SkillVersion.objects.count()) == counts


@override_settings(LLM_PROVIDER="none", SKILL_TRIGGER_SESSION_THRESHOLD=2)
def test_a_later_run_extends_the_skill_with_a_new_version(
    org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    _learn(org, CSV_TASKS[:2], django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        for index, task in enumerate(CSV_TASKS[2:4], start=10):
            session_send(org.api, f"csv-{index}", csv_session(task))
    second = LearningRun.objects.get(state="queued")
    assert learning_run_task.apply(args=[second.pk]).get() == "succeeded"
    [skill] = Skill.objects.all()
    assert skill.version == 2 and set(CSV_TASKS[:4]) <= set(skill.triggers)
    latest = SkillVersion.objects.get(skill=skill, number=2)
    assert latest.diff.startswith("--- v1\n+++ v2\n") and CSV_TASKS[2] in latest.diff


@override_settings(LLM_PROVIDER="none", LEARNING_RUN_SLICE_SECONDS=0)
def test_a_run_sliced_into_many_tasks_does_the_same_work(
    org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        for index, task in enumerate(CSV_TASKS[:5]):
            session_send(org.api, f"csv-{index}", csv_session(task))
    run = LearningRun.objects.get()
    results = []
    while not results or results[-1] == "continued":
        results.append(learning_run_task.apply(args=[run.pk]).get())
    # One slice per session distilled, then the curator's one batch.
    assert results == ["continued"] * 5 + ["succeeded"]
    run.refresh_from_db()
    assert run.skills_created == 1 and run.attempts == 6
    assert Skill.objects.count() == 1 and SkillVersion.objects.count() == 1


@override_settings(LLM_PROVIDER="none", SKILL_TRIGGER_SESSION_THRESHOLD=2)
def test_a_run_queued_while_another_runs_is_sent_again_when_that_one_ends(
    org: TenantFixture, django_capture_on_commit_callbacks, monkeypatch
) -> None:
    sent: list[int] = []

    def publish(name: str, run_id: int, **options: object) -> None:
        assert name == learning.LEARNING_RUN_TASK
        sent.append(run_id)

    monkeypatch.setattr(learning, "task_publish", publish)
    with django_capture_on_commit_callbacks(execute=True):
        for index, task in enumerate(CSV_TASKS[:2]):
            session_send(org.api, f"csv-{index}", csv_session(task))
    first = LearningRun.objects.get()
    claim = learning_run_claim(run_id=first.pk)
    assert claim is not None
    with django_capture_on_commit_callbacks(execute=True):
        for index, task in enumerate(CSV_TASKS[2:4], start=10):
            session_send(org.api, f"csv-{index}", csv_session(task))
    second = LearningRun.objects.get(state="queued")
    assert sent == [first.pk, second.pk]
    # Its worker finds the first one running and leaves it.
    assert learning_run_task.apply(args=[second.pk]).get() is None
    with django_capture_on_commit_callbacks(execute=True):
        ended = learning_run_execute(
            claim=claim, llm=None, embedders=write_embedders(), threshold=None
        )
    assert ended.state == "succeeded"
    assert sent == [first.pk, second.pk, second.pk]
    assert learning_run_task.apply(args=[second.pk]).get() == "succeeded"


CSV_TOOLS = [
    {"type": "function", "function": {"name": "read_csv", "description": "Read a UTF-8 CSV."}},
    {
        "type": "function",
        "function": {
            "name": "read_csv_latin1",
            "description": "Read a CSV file written in the latin-1 encoding into a table.",
        },
    },
]


@override_settings(LLM_PROVIDER="none")
def test_the_tools_sessions_declare_say_what_the_skill_does(
    org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        for index, task in enumerate(CSV_TASKS[:5]):
            session_send(org.api, f"csv-{index}", csv_session(task), tools=CSV_TOOLS)
    run = LearningRun.objects.get()
    assert learning_run_task.apply(args=[run.pk]).get() == "succeeded"
    said = "Read a CSV file written in the latin-1 encoding into a table."
    # The tool that worked, not the one that failed.
    contexts = Experience.objects.filter(distilled_by=run).values_list("context", flat=True)
    assert [context["tool_descriptions"] for context in contexts] == [
        {"read_csv_latin1": said}
    ] * len(contexts)
    [skill] = Skill.objects.all()
    assert skill.tool_descriptions == {"read_csv_latin1": said}
    assert skill.description.startswith(f"{said} Handles requests like")
    shown = org.api.get(f"/skills/{skill.pk}", {"user_id": "agent-user"}).json()
    assert shown["tool_descriptions"] == {"read_csv_latin1": said}
    # Its vector is fit from its requests and what the tool does, besides what it says it does.
    assert skill_phrasings(skill, lambda text: [text]) == [
        f"{skill.name}\n{skill.description}",
        *skill.triggers,
        said,
    ]


@override_settings(LLM_PROVIDER="none")
def test_a_session_that_declares_no_tools_learns_as_before(
    org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    _learn(org, CSV_TASKS[:5], django_capture_on_commit_callbacks)
    [skill] = Skill.objects.all()
    assert skill.tool_descriptions == {}
    assert skill.description.startswith("Handles requests like")
    assert skill_phrasings(skill, lambda text: [text])[1:] == skill.triggers


# What agents' own work looks like: no user turn after the request, every call "worked".
EXPORTS = ("Export the March invoices to invoices.csv.", "Export the April invoices to april.csv.")
REPORTED = "The totals are off by VAT (checked with password hunter2-garden). Re-run it."


def _unjudged_session(task: str) -> list[dict[str, object]]:
    return [
        {"role": "user", "content": task},
        *tool_turns("export_invoices", {"month": task.split()[2]}, "Wrote 212 invoices.", "c-1"),
        {"role": "assistant", "content": "Exported the invoices."},
    ]


@override_settings(LLM_PROVIDER="none", SKILL_TRIGGER_SESSION_THRESHOLD=2)
def test_a_task_session_closed_as_a_failure_teaches_that_without_a_user_verdict(
    org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        for index, task in enumerate(EXPORTS):
            session_id = f"export-{index}"
            session_send(org.api, session_id, _unjudged_session(task), close=False)
            closed = org.api.post(
                f"/sessions/{session_id}/close",
                {"user_id": "agent-user", "outcome": "failure", "note": REPORTED},
                format="json",
            )
            assert closed.status_code == 200, closed.content
    run = LearningRun.objects.get()
    assert learning_run_task.apply(args=[run.pk]).get() == "succeeded"
    links = LearningRunSession.objects.filter(run=run)
    assert set(links.values_list("outcome", flat=True)) == {"failure"}
    lessons = Experience.objects.filter(distilled_by=run)
    assert lessons.count() == 2
    for lesson in lessons:
        assert (lesson.lesson_type, lesson.outcome) == ("avoid", "failure")
        assert lesson.signal == "inferred"  # the agent's word, not a user's
        assert lesson.action == "export_invoices"
        assert lesson.evidence == "The totals are off by VAT (checked with password <password>)."
        assert lesson.source_session.session_id.startswith("export-")
    # Nothing the note held in clear reached a lesson; the turns are the ones sent.
    for lesson in Experience.objects.all():
        assert "hunter2-garden" not in json.dumps(
            [lesson.content, lesson.evidence, lesson.reason, lesson.title, lesson.context]
        )
    assert Message.objects.filter(session__session_id="export-0").count() == 4
    assert not Message.objects.filter(role="user", text__contains="VAT").exists()
