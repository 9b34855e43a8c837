"""Learning runs with a model, over the OpenAI chat-completions wire format (a loopback server):
the distiller's and the curator's calls, batches that fit the window, lessons too large for
any batch pooled with the reason, the pool consumed by the next run, and the token cap."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from mirix_site.providers.llm import estimate_tokens
from skills.models import Experience, LearningRun, LearningRunSession, Skill, SkillVersion
from skills.tasks import learning_run_task
from tests.factories import TenantFixture
from tests.loopback import LoopbackServer, RecordedRequest, Reply, openai_reply
from tests.skills.sessions import CSV_TASKS, NEW_TASK, csv_session, session_send

LESSON = {
    "type": "learn",
    "title": "Read legacy CSV files as latin-1",
    "content": "When read_csv fails with a UnicodeDecodeError, read the file as latin-1.",
    "task": "read a CSV file",
    "action": "read_csv_latin1(path, encoding='latin-1')",
    "evidence": "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9",
    "signal": "tool_error",
    "importance": 0.8,
    "credibility": 1.7,  # clamped to 1
    "outcome": "success",
}


def _schema(request: RecordedRequest) -> str:
    return request.json["response_format"]["json_schema"]["name"]


def _prompt(request: RecordedRequest) -> str:
    return request.json["messages"][-1]["content"]


def _lesson_ids(request: RecordedRequest) -> list[int]:
    return [int(found) for found in re.findall(r'"id": (\d+)', _prompt(request))]


class Model:
    """Answers the distiller with ``lessons`` per session and the curator by creating one
    skill from the first batch and editing it with every later one."""

    def __init__(self, lessons: list[dict[str, Any]]) -> None:
        self.lessons = lessons
        self.created = False

    def __call__(self, request: RecordedRequest) -> Reply:
        if _schema(request) == "lessons":
            return Reply(200, openai_reply({"lessons": self.lessons}))
        ids = _lesson_ids(request)
        if not self.created:
            self.created = True
            operation = {
                "op": "create",
                "name": "read-legacy-csv",
                "description": "Reads CSV files that are not UTF-8 (latin-1 exports).",
                "triggers": ["read a CSV file", "load a CSV export"],
                "instructions": "# Reading legacy CSV\n\n1. Try utf-8.\n2. On a "
                "UnicodeDecodeError, call read_csv_latin1.\n",
                "pitfalls": ["Do not retry utf-8 unchanged."],
                "lesson_ids": ids,
            }
        else:
            operation = {
                "op": "edit",
                "skill": "read-legacy-csv",
                "triggers": ["read a CSV file", "load a CSV export", "import a CSV"],
                "lesson_ids": ids,
            }
        # A bad item beside the good one: dropped with a warning, the other applied.
        return Reply(200, openai_reply({"operations": [operation, {"op": "explode"}]}))


@pytest.fixture
def llm(loopback: LoopbackServer, settings) -> LoopbackServer:
    settings.LLM_PROVIDER = "openai"
    settings.LLM_MODEL = "test-model"
    settings.LLM_API_BASE = f"{loopback.url}/v1"
    settings.LLM_API_KEY = "sk-loopback"
    return loopback


def _sessions(org: TenantFixture, count: int, capture, first: int = 0) -> LearningRun:
    with capture(execute=True):
        for index in range(first, first + count):
            task = CSV_TASKS[index % len(CSV_TASKS)]
            session_send(org.api, f"csv-{index}", csv_session(task))
    return LearningRun.objects.get(state="queued")


def test_end_to_end_with_a_model(
    org: TenantFixture, llm: LoopbackServer, django_capture_on_commit_callbacks
) -> None:
    llm.respond(Model([LESSON]))
    run = _sessions(org, 5, django_capture_on_commit_callbacks)
    assert learning_run_task.apply(args=[run.pk]).get() == "succeeded"
    run.refresh_from_db()
    assert run.llm_calls == 6 and run.input_tokens == 6 * 321 and run.output_tokens == 6 * 45
    assert run.skills_created == 1 and run.experiences_distilled == 5
    assert any("Operation 1 dropped" in warning for warning in run.warnings)
    lessons = Experience.objects.filter(distilled_by=run)
    assert {lesson.credibility for lesson in lessons} == {1.0}
    assert {lesson.status for lesson in lessons} == {"consumed"}
    # The structure read without a model is the lessons' context.
    assert {tuple(lesson.context["tools"]) for lesson in lessons} == {("read_csv_latin1",)}

    found = org.api.post(
        "/skills/retrieve", {"user_id": "agent-user", "task": NEW_TASK}, format="json"
    ).json()
    assert found["skills"][0]["name"] == "read-legacy-csv"
    skill = Skill.objects.get()
    detail = org.api.get(f"/skills/{skill.pk}").json()
    assert set(detail["source_experience_ids"]) == {
        str(pk) for pk in lessons.values_list("pk", flat=True)
    }
    assert "+1. Try utf-8." in org.api.get(f"/skills/{skill.pk}/versions/1/diff").json()["diff"]

    # A second run edits the skill: version 2; rolling back to 1 writes 3, equal to 1.
    run = _sessions(org, 5, django_capture_on_commit_callbacks, first=5)
    assert learning_run_task.apply(args=[run.pk]).get() == "succeeded"
    skill.refresh_from_db()
    assert skill.version == 2 and "import a CSV" in skill.triggers
    rolled = org.api.post(f"/skills/{skill.pk}/rollback", {"version": 1}, format="json").json()
    assert rolled["version"] == 3
    assert (
        SkillVersion.objects.get(skill=skill, number=3).snapshot
        == SkillVersion.objects.get(skill=skill, number=1).snapshot
    )


def test_batches_fit_the_window_and_what_never_fits_is_pooled(
    org: TenantFixture, llm: LoopbackServer, settings, django_capture_on_commit_callbacks
) -> None:
    settings.LLM_CONTEXT_WINDOW = 20_000
    budget = int(20_000 * 0.8) - settings.CURATOR_RESERVE_TOKENS
    wordy = {**LESSON, "content": "latin-1 " * 240, "task": "read a CSV file " * 100}
    llm.respond(Model([wordy] * 4))
    run = _sessions(org, 5, django_capture_on_commit_callbacks)
    # A lesson no batch can hold (recorded long ago, before the distiller capped its fields).
    giant = Experience.objects.create(
        organization=org.organization,
        client=org.client,
        end_user=run.end_user,
        task="read a CSV file",
        action="read_csv_latin1",
        action_key="read_csv_latin1",
        outcome="success",
        score=1.0,
        origin="distilled",
        occurred_at=run.created_at,
        lesson_type="learn",
        title="Everything about CSV",
        content="csv " * 40_000,
        status="pending",
    )
    assert learning_run_task.apply(args=[run.pk]).get() == "succeeded"
    curator_calls = [r for r in llm.requests if _schema(r) == "skill_operations"]
    assert len(curator_calls) >= 2
    for request in curator_calls:
        sent = request.json["messages"][0]["content"] + _prompt(request)
        assert estimate_tokens(sent) <= budget
    giant.refresh_from_db()
    assert giant.status == "pooled" and "more than a curator batch holds" in giant.pool_reason
    others = Experience.objects.filter(distilled_by=run)
    assert {lesson.status for lesson in others} == {"consumed"}


def test_the_token_cap_ends_a_run_as_budget_exhausted_and_the_pool_joins_the_next(
    org: TenantFixture, llm: LoopbackServer, settings, django_capture_on_commit_callbacks
) -> None:
    llm.respond(Model([LESSON]))
    # Five distiller calls of 366 tokens each spend the cap before the curator's first step.
    settings.CURATOR_MAX_TOKENS_PER_RUN = 1500
    run = _sessions(org, 5, django_capture_on_commit_callbacks)
    assert learning_run_task.apply(args=[run.pk]).get() == "budget_exhausted"
    run.refresh_from_db()
    assert "tokens spent" in run.error and not Skill.objects.exists()
    shown = org.api.get(f"/learning-runs/{run.pk}").json()
    assert shown["state"] == "budget_exhausted" and shown["experiences_pooled"] == 5
    assert shown["experiences_distilled"] == 5 and shown["llm_calls"] == 5
    waiting = Experience.objects.filter(distilled_by=run)
    assert {lesson.status for lesson in waiting} == {"pooled"}
    assert all("next run" in lesson.pool_reason for lesson in waiting)

    settings.CURATOR_MAX_TOKENS_PER_RUN = 200_000
    second = _sessions(org, 5, django_capture_on_commit_callbacks, first=5)
    assert learning_run_task.apply(args=[second.pk]).get() == "succeeded"
    assert {lesson.status for lesson in waiting.all()} == {"consumed"}
    assert set(Experience.objects.filter(consumed_by=second).values_list("pk", flat=True)) >= set(
        waiting.values_list("pk", flat=True)
    )


def test_a_garbage_answer_is_a_warning_not_a_silent_success(
    org: TenantFixture, llm: LoopbackServer, django_capture_on_commit_callbacks
) -> None:
    def answer(request: RecordedRequest) -> Reply:
        if _schema(request) == "lessons":
            return Reply(200, openai_reply({"thoughts": "nothing to see"}))
        return Reply(200, openai_reply({"operations": []}))

    llm.respond(answer)
    run = _sessions(org, 5, django_capture_on_commit_callbacks)
    assert learning_run_task.apply(args=[run.pk]).get() == "succeeded"
    run.refresh_from_db()
    assert run.experiences_distilled == 0
    sessions = LearningRunSession.objects.filter(run=run).order_by("session_id")
    assert sorted(run.warnings) == sorted(
        f"session {link.session_id}: Item 0 of the model's answer is not a lesson."
        for link in sessions
    )
    assert len(run.warnings) == 5


class Scripted:
    """Lessons for every session; the curator's calls answered by a list, one per call."""

    def __init__(self, answers: list[list[dict[str, Any]]]) -> None:
        self.answers = answers

    def __call__(self, request: RecordedRequest) -> Reply:
        if _schema(request) == "lessons":
            return Reply(200, openai_reply({"lessons": [LESSON]}))
        ids = _lesson_ids(request)
        operations = [
            dict(op, lesson_ids=ids if op.get("lesson_ids") else []) for op in self.answers.pop(0)
        ]
        return Reply(200, openai_reply({"operations": operations}))


def _skill(name: str, description: str) -> dict[str, Any]:
    return {
        "op": "create",
        "name": name,
        "description": description,
        "instructions": f"# {name}\n\n1. Open the file.\n2. Parse each row.\n3. Check the count.\n",
        "lesson_ids": True,
    }


def test_a_merge_deprecates_its_sources_and_a_rewrite_is_flagged_for_review(
    org: TenantFixture, llm: LoopbackServer, django_capture_on_commit_callbacks
) -> None:
    llm.respond(
        Scripted(
            [
                [_skill("read-csv", "Reads CSV files."), _skill("read-tsv", "Reads TSV files.")],
                [
                    {
                        "op": "merge",
                        "skill": "read-csv",
                        "sources": ["read-tsv"],
                        "description": "Reads CSV and TSV files.",
                        "lesson_ids": True,
                    },
                    {
                        "op": "edit",
                        "skill": "read-csv",
                        "instructions": "# Delimited files\n\nUse pandas.read_csv with sep=None.\n",
                    },
                ],
            ]
        )
    )
    first = _sessions(org, 5, django_capture_on_commit_callbacks)
    assert learning_run_task.apply(args=[first.pk]).get() == "succeeded"
    second = _sessions(org, 5, django_capture_on_commit_callbacks, first=5)
    assert learning_run_task.apply(args=[second.pk]).get() == "succeeded"
    second.refresh_from_db()
    assert (second.skills_merged, second.skills_edited) == (1, 1), second.warnings
    kept, merged = Skill.objects.get(name="read-csv"), Skill.objects.get(name="read-tsv")
    assert merged.status == "deprecated" and merged.version == 2
    assert SkillVersion.objects.get(skill=merged, number=2).note == "Merged into read-csv."
    assert kept.version == 3 and kept.description == "Reads CSV and TSV files."
    assert kept.needs_review and "flagged for review" in kept.review_reason
    rewrite = SkillVersion.objects.get(skill=kept, number=3)
    assert rewrite.needs_review and not SkillVersion.objects.get(skill=kept, number=2).needs_review
    served = org.api.post(
        "/skills/retrieve", {"user_id": "agent-user", "task": "read a TSV file"}, format="json"
    ).json()
    assert "read-tsv" not in [skill["name"] for skill in served["skills"]]


def test_the_curator_is_shown_what_the_declared_tools_do_and_the_skill_keeps_it(
    org: TenantFixture, llm: LoopbackServer, django_capture_on_commit_callbacks
) -> None:
    llm.respond(Model([LESSON]))
    said = "Read a CSV file written in the latin-1 encoding into a table."
    tools = [{"name": "read_csv_latin1", "description": said, "input_schema": {}}]
    with django_capture_on_commit_callbacks(execute=True):
        for index, task in enumerate(CSV_TASKS[:5]):
            session_send(org.api, f"csv-{index}", csv_session(task), tools=tools)
    run = LearningRun.objects.get(state="queued")
    assert learning_run_task.apply(args=[run.pk]).get() == "succeeded"
    [curator_call] = [r for r in llm.requests if _schema(r) == "skill_operations"]
    assert json.dumps({"read_csv_latin1": said}) in _prompt(curator_call)
    # The model's skill keeps them for its vector, whatever its own description says.
    skill = Skill.objects.get()
    assert skill.description.startswith("Reads CSV files that are not UTF-8")
    assert skill.tool_descriptions == {"read_csv_latin1": said}


def test_the_model_reads_what_the_agent_stated_on_closing(
    org: TenantFixture, llm: LoopbackServer, settings, django_capture_on_commit_callbacks
) -> None:
    settings.SKILL_TRIGGER_SESSION_THRESHOLD = 2
    llm.respond(Model([LESSON]))
    note = "Half the rows were skipped; the admin password hunter2-garden expired."
    with django_capture_on_commit_callbacks(execute=True):
        for index, task in enumerate(CSV_TASKS[:2]):
            session_send(org.api, f"stated-{index}", csv_session(task), close=False)
            closed = org.api.post(
                f"/sessions/stated-{index}/close",
                {"user_id": "agent-user", "outcome": "partial", "note": note},
                format="json",
            )
            assert closed.status_code == 200, closed.content
    run = LearningRun.objects.get(state="queued")
    assert learning_run_task.apply(args=[run.pk]).get() == "succeeded"
    prompts = [_prompt(request) for request in llm.requests if _schema(request) == "lessons"]
    assert len(prompts) == 2
    for prompt in prompts:
        assert prompt.startswith("The agent closed this session stating:\n  outcome: partial\n")
        assert "note: Half the rows were skipped; the admin password" in prompt
        assert "hunter2-garden" not in prompt
    # The stated outcome wins over the user's closing "Thanks, that works now."
    links = LearningRunSession.objects.filter(run=run)
    assert set(links.values_list("outcome", flat=True)) == {"partial"}
