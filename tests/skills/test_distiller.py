"""The distiller: a model's answer parsed whatever its wrapping, and a session's structure read
without a model (a tool error then a fix, a failure repeated, a user's verdict)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from skills.learning.distill import Stated, lessons_parse, session_distill, turns_view

LESSON = {
    "type": "learn",
    "title": "Pin the lockfile before upgrading",
    "content": "npm ci failed until the lockfile was regenerated.",
    "evidence": "npm ERR! missing: left-pad",
    "signal": "tool_error",
    "importance": 0.8,
    "credibility": 0.9,
}
AVOID = LESSON | {"type": "avoid", "title": "Do not delete node_modules by hand"}


@pytest.mark.parametrize(
    "answer",
    [
        json.dumps([LESSON, AVOID]),
        f"```json\n{json.dumps([LESSON, AVOID])}\n```",
        f"Here is what I learned:\n{json.dumps([LESSON, AVOID])}\nHope this helps.",
        json.dumps({"lessons": [LESSON, AVOID]}),
    ],
    ids=["bare-array", "fenced", "inside-prose", "object-holding-the-list"],
)
def test_each_accepted_shape_is_read(answer: str) -> None:
    parsed = lessons_parse(answer, task="upgrade the build")
    assert [lesson.lesson_type for lesson in parsed.lessons] == ["learn", "avoid"]
    assert parsed.lessons[0].title == LESSON["title"]
    assert parsed.lessons[0].task == "upgrade the build"
    assert parsed.warnings == []


def test_one_object_is_one_lesson() -> None:
    parsed = lessons_parse(json.dumps(LESSON))
    assert [lesson.title for lesson in parsed.lessons] == [LESSON["title"]]


@pytest.mark.parametrize(
    "answer", ["", "I could not find anything to learn.", "{not json", "[1, 2", "42", "null"]
)
def test_garbage_gives_no_lessons_and_a_warning(answer: str) -> None:
    parsed = lessons_parse(answer)
    assert parsed.lessons == []
    assert parsed.warnings, "garbage must never pass as a silent success"


def test_scores_are_clamped_and_nan_is_zero() -> None:
    items = [
        LESSON | {"importance": 7, "credibility": -2},
        LESSON | {"importance": "0.25", "credibility": "high"},
    ]
    answer = json.dumps(items).replace('"high"', "NaN")
    first, second = lessons_parse(answer).lessons
    assert (first.importance, first.credibility) == (1.0, 0.0)
    assert (second.importance, second.credibility) == (0.25, 0.0)


def test_a_bad_item_is_dropped_and_the_others_kept() -> None:
    items = [LESSON, "not an object", {"type": "maybe", "title": "x"}, {"type": "learn"}, AVOID]
    parsed = lessons_parse(json.dumps(items))
    assert [lesson.title for lesson in parsed.lessons] == [LESSON["title"], AVOID["title"]]
    assert len(parsed.warnings) == 3


# --- Without a model --------------------------------------------------------------------------


@dataclass
class Turn:
    pk: int
    role: str
    text: str = ""
    tool_calls: list[dict[str, Any]] | None = None
    name: str = ""
    tool_call_id: str = ""


@dataclass
class Session:
    turns: list[Turn] = field(default_factory=list)

    def say(self, role: str, text: str = "", **extra: Any) -> Session:
        self.turns.append(Turn(pk=len(self.turns) + 1, role=role, text=text, **extra))
        return self

    def call(self, tool: str, arguments: dict[str, Any], result: str) -> Session:
        call_id = f"call-{len(self.turns)}"
        self.say(
            "assistant",
            tool_calls=[
                {"id": call_id, "function": {"name": tool, "arguments": json.dumps(arguments)}}
            ],
        )
        return self.say("tool", result, name=tool, tool_call_id=call_id)


def test_a_tool_error_then_a_fix_is_a_learn_lesson() -> None:
    session = (
        Session()
        .say("user", "Deploy the service to staging.")
        .call("kubectl_apply", {"file": "deploy.yaml"}, "error: ImagePullBackOff for api:latest")
        .call("docker_push", {"image": "api:latest"}, "pushed api:latest")
        .say("assistant", "Pushed the image and the deploy went through.")
    )
    distilled = session_distill(session.turns)
    [lesson] = distilled.lessons
    assert lesson.lesson_type == "learn" and lesson.signal == "tool_error"
    assert lesson.task == "Deploy the service to staging."
    assert lesson.action == "docker_push"  # another tool: its arguments are the task's
    assert "ImagePullBackOff" in lesson.evidence
    assert set(lesson.source_message_ids) == {2, 3, 4, 5}
    assert distilled.outcome == "success"


def test_the_same_tool_called_otherwise_is_the_action_with_its_arguments() -> None:
    session = (
        Session()
        .say("user", "Load sales.csv.")
        .call("read_csv", {"path": "sales.csv"}, "UnicodeDecodeError: byte 0xe9")
        .call("read_csv", {"path": "sales.csv"}, "UnicodeDecodeError: byte 0xe9")
        .call("read_csv", {"path": "sales.csv", "encoding": "latin-1"}, "Loaded 120 rows.")
        .say("assistant", "Read it as latin-1.")
        .say("user", "Thanks, that works.")
    )
    learn, avoid, confirmation = session_distill(session.turns).lessons
    called_otherwise = 'read_csv({"path": "sales.csv", "encoding": "latin-1"})'
    assert (learn.lesson_type, learn.action) == ("learn", called_otherwise)
    # The tool worked called otherwise: what failed is the call, not the tool.
    assert (avoid.lesson_type, avoid.action) == ("avoid", 'read_csv({"path": "sales.csv"})')
    # The user confirms the work since the request: the tools that worked.
    assert (confirmation.signal, confirmation.action) == ("user_confirmation", "read_csv")


def test_a_failure_repeated_unchanged_is_an_avoid_lesson() -> None:
    session = Session().say("user", "Run the migrations.")
    for _ in range(3):
        session.call("migrate", {"db": "prod"}, "FATAL: password authentication failed")
    distilled = session_distill(session.turns)
    [lesson] = distilled.lessons
    assert lesson.lesson_type == "avoid" and "3 times" in lesson.content
    assert lesson.action == "migrate"  # it never worked: the tool is what failed
    assert lesson.outcome == "failure"
    assert distilled.outcome == "failure"


@pytest.mark.parametrize(
    "result",
    [
        "401 Unauthorized: the access token expired",
        "HTTP/1.1 503 Service Unavailable",
        "429 Too Many Requests: retry after 60 s",
        "! [rejected] main -> main (non-fast-forward)",
        "Forbidden: the key may not write here",
        "ParserError: every line still fails to decode",
        "KeyError: 'amount'",
        "Blocked by policy: TLS verification may not be disabled",
        "Request denied.",
    ],
)
def test_http_statuses_exception_names_and_rejections_are_failures(result: str) -> None:
    session = (
        Session()
        .say("user", "Fetch the invoices.")
        .call("call_api", {"path": "/invoices"}, result)
        .call("refresh_oauth_token", {}, "200 OK: 12 invoices")
    )
    [lesson] = session_distill(session.turns).lessons
    assert lesson.action == "refresh_oauth_token" and lesson.evidence


def test_a_result_saying_no_errors_is_a_success() -> None:
    session = (
        Session()
        .say("user", "Lint the repo.")
        .call("ruff", {}, "Found 0 errors.")
        .call("pytest", {}, "12 passed, no errors")
        .call("send_batch", {}, "All 1,200 records sent; 0 refused.")
    )
    distilled = session_distill(session.turns)
    assert distilled.lessons == [] and distilled.outcome == "success"


def test_user_verdicts_are_critique_and_confirmation_and_decide_the_outcome() -> None:
    session = (
        Session()
        .say("user", "Make the login page load faster.")
        .say("assistant", "I inlined all the scripts.")
        .say("user", "That broke the page, it is still slow.")
        .say("assistant", "I added a Redis cache for the session lookup.")
        .say("user", "Perfect, it works now, thanks!")
    )
    distilled = session_distill(session.turns)
    critique, confirmation = distilled.lessons
    assert (critique.lesson_type, critique.signal) == ("avoid", "user_critique")
    assert critique.action == "I inlined all the scripts."
    assert (confirmation.lesson_type, confirmation.signal) == ("learn", "user_confirmation")
    assert "Redis cache" in confirmation.action
    assert distilled.outcome == "success"


def test_a_session_without_signals_teaches_nothing() -> None:
    session = Session().say("user", "What time is it in Tokyo?").say("assistant", "It is 9 pm.")
    distilled = session_distill(session.turns)
    assert distilled.lessons == [] and distilled.outcome is None


def test_a_long_session_is_split_into_parts_that_fit_the_window() -> None:
    from mirix_site.providers.llm import estimate_tokens
    from skills.learning.distill import transcript_parts

    session = Session().say("user", "Migrate the database.")
    for index in range(40):
        session.call("psql", {"step": index}, f"step {index} done " + "ok " * 100)
    parts = transcript_parts(session.turns, budget=1_000)
    assert len(parts) >= 5
    assert all(estimate_tokens(part) <= 1_000 for part in parts)
    assert parts[0].startswith("user: Migrate the database.")
    joined = "\n".join(parts)
    assert all(f"step {index} done" in joined for index in range(40))
    huge = Session().say("user", "x" * 50_000)
    [cut] = transcript_parts(huge.turns, budget=1_000)
    assert estimate_tokens(cut) <= 1_000


def test_the_task_is_the_whole_first_request_not_its_first_sentence() -> None:
    session = (
        Session()
        .say("user", "I'm planning a trip.   Can you find\\nflights from Boston to Denver?")
        .call("flight_search", {"from": "BOS"}, "3 flights found")
        .say("user", "Thanks, that works.")
    )
    session.turns[0].text = "I'm planning a trip.   Can you find\nflights from Boston to Denver?"
    distilled = session_distill(session.turns)
    assert distilled.task == "I'm planning a trip. Can you find flights from Boston to Denver?"


# --- What the agent stated on closing the session --------------------------------------------


def _import_session() -> Session:
    return (
        Session()
        .say("user", "Import orders.csv into the warehouse.")
        .call("read_csv", {"path": "orders.csv"}, "Loaded 812 rows.")
        .call("warehouse_load", {"table": "orders"}, "Inserted 812 rows.")
        .say("assistant", "Loaded the orders, but two columns came out garbled.")
    )


def test_a_stated_failure_without_a_verdict_is_the_outcome_and_an_avoid_lesson() -> None:
    session = _import_session()
    plain = session_distill(session.turns)
    assert plain.outcome == "success"  # what the last tool call did
    stated = Stated(outcome="failure", note="Columns 4 and 5 are mojibake. Needs a re-run.")
    distilled = session_distill(session.turns, stated=stated)
    assert distilled.outcome == "failure"
    [lesson] = distilled.lessons
    assert (lesson.lesson_type, lesson.outcome, lesson.signal) == ("avoid", "failure", "inferred")
    # About the work done: the tools that worked since the request.
    assert lesson.action == "read_csv, warehouse_load"
    assert lesson.evidence == "Columns 4 and 5 are mojibake."
    assert "The agent reported a failure: Columns 4 and 5" in lesson.content
    assert "user" not in lesson.content.lower()
    assert lesson.source_message_ids == (session.turns[-1].pk,)  # the agent's last answer


@pytest.mark.parametrize(
    ("outcome", "lesson_type", "title"),
    [
        ("success", "learn", "Reported done: read_csv, warehouse_load"),
        ("partial", "avoid", "Reported partly done: read_csv, warehouse_load"),
    ],
)
def test_a_stated_success_is_a_learn_lesson_and_a_partial_an_avoid(
    outcome: str, lesson_type: str, title: str
) -> None:
    distilled = session_distill(_import_session().turns, stated=Stated(outcome=outcome))
    [lesson] = distilled.lessons
    assert (lesson.lesson_type, lesson.title, lesson.outcome) == (lesson_type, title, outcome)
    assert lesson.evidence == "" and distilled.outcome == outcome


def test_a_stated_outcome_wins_over_the_users_verdict_and_judges_only_the_work_after_it() -> None:
    session = (
        Session()
        .say("user", "Make the login page load faster.")
        .say("assistant", "I added a Redis cache for the session lookup.")
        .say("user", "Perfect, it works now, thanks!")
    )
    judged = session_distill(session.turns, stated=Stated(outcome="failure", note="Cache is cold."))
    # The user's verdict judged all the work: its lesson stays, none is added for the same work.
    [confirmation] = judged.lessons
    assert confirmation.signal == "user_confirmation"
    assert judged.outcome == "failure"
    session.say("assistant", "I also minified the stylesheet.")
    later = session_distill(session.turns, stated=Stated(outcome="failure", note="Cache is cold."))
    confirmation, reported = later.lessons
    assert (reported.lesson_type, reported.action) == ("avoid", "I also minified the stylesheet.")


def test_a_note_without_an_outcome_adds_no_lesson() -> None:
    session = _import_session()
    distilled = session_distill(session.turns, stated=Stated(note="Done, mostly."))
    assert distilled.lessons == [] and distilled.outcome == "success"


def test_the_note_is_redacted_with_what_the_turns_gave() -> None:
    session = (
        Session()
        .say("user", "Connect to the reporting database.")
        .call("db_connect", {"password": "Tr0ub4dor&3-horse"}, "connected")
    )
    turns, note = turns_view(session.turns, note="Used Tr0ub4dor&3-horse; the db is slow.")
    assert "Tr0ub4dor" not in note and "the db is slow" in note
    assert "Tr0ub4dor" not in json.dumps(turns[1].tool_calls)
