"""The distiller: what a finished task session teaches, as lessons (experiences to be).

Two readings of a session, both pure (they take the turns, return lessons, touch nothing):

- ``lessons_parse`` reads a model's answer to the distilling prompt. Models wrap JSON in
  prose and fences, answer one object where a list was asked, and get single items wrong: a
  bare array, a fenced block, an array inside prose, one object (or an object holding the
  list) are all read; an item that is not a lesson is dropped with a warning and the others
  kept; scores are clamped to [0, 1] (NaN is 0). An answer holding no lesson at all gives an
  empty list and a warning, never a silent success.
- ``session_distill`` reads the session's structure without a model. A tool error followed by
  a later successful call (of the same tool or another) is a ``learn`` lesson: the call that
  worked is the fix, the error its evidence. The same call failing again unchanged is an
  ``avoid``. A user turn after the first that rejects the work is a critique of the action just
  before it (``avoid``), one that confirms it a confirmation (``learn``); the session's outcome
  is the last such verdict, else what its last tool call did. What the agent stated on
  closing the session (``Stated``: its outcome and note) wins over both: the work no verdict
  has judged yet gets the lesson a verdict would give (``learn`` for a success, ``avoid``
  otherwise), resting on the agent's word (signal ``inferred``) and quoting its note. The
  stored turns are left as they are: no user turn is made up for it.

A run's distill step (``sessions_distill``) reads each of its sessions so (with the model,
transcript part by part, when there is one) and records the lessons once, in the transaction
that marks the session distilled, through the run's fence (``skills.learning.runs``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from mirix_site.common.text import clipped
from mirix_site.providers.llm import LLMProvider, estimate_tokens
from mirix_site.search.index import documents_index
from sessions.models import Message, Session
from sessions.sensitive import sensitive_redacted, turns_redacted
from skills.embedding_queue import experiences_embed_soon
from skills.learning.prompts import DISTILL_SCHEMA, DISTILL_SYSTEM
from skills.learning.runs import (
    Budget,
    Claim,
    llm_call,
    run_fenced,
    run_warn,
    slice_check,
    window_budget,
)
from skills.learning.transcripts import first_sentence, verdict_read
from skills.models import (
    Experience,
    LearningRun,
    LearningRunSession,
    LessonStatus,
    Origin,
    Outcome,
)
from skills.search import EXPERIENCE_KIND
from skills.services.experiences import experience_redacted

MAX_TITLE_CHARS = 120
MAX_TASK_CHARS = 500
MAX_TEXT_CHARS = 2000
MAX_EVIDENCE_CHARS = 300
LESSON_TYPES = ("learn", "avoid")
SIGNALS = ("tool_error", "user_critique", "user_confirmation", "self_correction", "inferred")

# What a tool's result says when the call failed. Words, not substrings: "errors: 0" and
# "no errors" are successes.
_TOOL_FAILED = re.compile(
    r"(?<![\w-])(error|exception|traceback|failed|fails|failure|fatal|not found|no such file|"
    r"denied|blocked|not allowed|not permitted|timed out|timeout|refused|rejected|cannot|can't|"
    r"unable to|unauthorized|forbidden|too many requests|bad request|bad gateway|"
    r"service unavailable|exit (code|status) [1-9]\d*|status( code)? [45]\d\d)(?![\w-])"
    # An exception's name ("ParserError: ..."), and a result that starts with an HTTP error
    # status ("401 Unauthorized", "HTTP/1.1 503").
    r"|(?-i:\b[A-Z]\w*(Error|Exception)\b)|^\s*(HTTP/[\d.]+\s+)?[45]\d\d\b",
    re.I,
)
_NO_ERRORS = re.compile(
    r"\b((no|0|zero) (errors?|failures?|failed|refused|rejected|exceptions?)|errors?: 0|"
    r"without errors?)\b",
    re.I,
)
_JSON_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


class Turn(Protocol):
    """A stored turn as the distiller reads it (``sessions.models.Message``)."""

    pk: int
    role: str
    text: str
    tool_calls: list[dict[str, Any]] | None
    name: str
    tool_call_id: str


@dataclass(frozen=True)
class RedactedTurn:
    """A turn with its sensitive values replaced by placeholders: what lessons are read from,
    by the structure or by a model, so that no lesson (nor a model's prompt) holds one."""

    pk: int
    role: str
    text: str
    tool_calls: list[dict[str, Any]] | None
    name: str
    tool_call_id: str


@dataclass(frozen=True)
class Stated:
    """How the agent that closed the task session says its work went (``Session.outcome``
    and ``note``; the note redacted as the turns are, ``turns_view``)."""

    outcome: str | None = None
    note: str = ""


@dataclass(frozen=True)
class _Note:
    """The closer's note read as one more turn of the session, so that a value given in a
    turn and repeated in the note (or the other way round) is redacted in both."""

    text: str
    tool_calls: None = None


def turns_view(turns: Sequence[Turn], *, note: str = "") -> tuple[list[RedactedTurn], str]:
    """The turns of one session as lessons are read from them, and the closer's note: redacted
    (``sessions.sensitive.turns_redacted``)."""
    *redacted, (redacted_note, _) = turns_redacted([*turns, _Note(note)])
    return [
        RedactedTurn(turn.pk, turn.role, text, tool_calls, turn.name, turn.tool_call_id)
        for turn, (text, tool_calls) in zip(turns, redacted, strict=True)
    ], redacted_note


@dataclass(frozen=True)
class Lesson:
    """One thing a session teaches, with what it rests on."""

    lesson_type: str  # learn | avoid
    title: str
    content: str
    task: str
    action: str
    evidence: str
    signal: str
    importance: float
    credibility: float
    outcome: str  # the outcome the lesson records for its action (success | failure | partial)
    source_message_ids: tuple[int, ...] = ()


@dataclass
class Distilled:
    lessons: list[Lesson] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    outcome: str | None = None  # the session's, when it says
    # The session's structure (read without a model, whichever reading gave the lessons): the
    # user's request, the calls that worked in order, and the tools they and the failures used.
    task: str = ""
    steps: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    failed_tools: list[str] = field(default_factory=list)
    # What the tools that worked do, as the session declared them (name → description).
    tool_descriptions: dict[str, str] = field(default_factory=dict)

    @property
    def context(self) -> dict[str, Any]:
        """What each lesson of the session records as its experience's context."""
        return {
            "tools": self.tools,
            "steps": self.steps,
            "failed_tools": self.failed_tools,
            "tool_descriptions": self.tool_descriptions,
        }


# --- The model's answer -------------------------------------------------------------------------


def _json_candidates(text: str) -> list[str]:
    """Where JSON may sit in a model's answer: all of it, each fenced block, and the widest
    array and object spans inside prose."""
    found = [text, *_JSON_FENCE.findall(text)]
    for opening, closing in ("[]", "{}"):
        start, end = text.find(opening), text.rfind(closing)
        if 0 <= start < end:
            found.append(text[start : end + 1])
    return found


def _items(value: Any) -> list[Any] | None:
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        for key in ("lessons", "experiences", "items"):
            if isinstance(value.get(key), list):
                return value[key]
        return [value]
    return None


def _score(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if math.isnan(number) else min(1.0, max(0.0, number))


def _text(value: Any, limit: int) -> str:
    return value.strip()[:limit] if isinstance(value, str) else ""


def _lesson_read(item: Any, task: str) -> Lesson | None:
    if not isinstance(item, dict):
        return None
    lesson_type = str(item.get("type") or item.get("lesson_type") or "").lower()
    title = _text(item.get("title"), MAX_TITLE_CHARS)
    content = _text(item.get("content"), MAX_TEXT_CHARS)
    if lesson_type not in LESSON_TYPES or not (title or content):
        return None
    signal = str(item.get("signal") or "inferred").lower()
    outcome = str(item.get("outcome") or "").lower()
    if outcome not in Outcome.values:
        outcome = Outcome.SUCCESS if lesson_type == "learn" else Outcome.FAILURE
    return Lesson(
        lesson_type=lesson_type,
        title=title or first_sentence(content, MAX_TITLE_CHARS),
        content=content or title,
        task=_text(item.get("task"), MAX_TEXT_CHARS) or task,
        action=_text(item.get("action"), MAX_TEXT_CHARS) or title or content,
        evidence=_text(item.get("evidence"), MAX_EVIDENCE_CHARS),
        signal=signal if signal in SIGNALS else "inferred",
        importance=_score(item.get("importance")),
        credibility=_score(item.get("credibility")),
        outcome=outcome,
    )


def lessons_parse(text: str, *, task: str = "") -> Distilled:
    """The lessons in a model's answer (see the module's docstring for what is accepted)."""
    distilled = Distilled()
    items = None
    for candidate in _json_candidates(text):
        try:
            items = _items(json.loads(candidate))
        except ValueError:
            continue
        if items is not None:
            break
    if items is None:
        distilled.warnings.append("The model's answer held no JSON lessons.")
        return distilled
    for position, item in enumerate(items):
        lesson = _lesson_read(item, task)
        if lesson is None:
            distilled.warnings.append(f"Item {position} of the model's answer is not a lesson.")
        else:
            distilled.lessons.append(lesson)
    if not distilled.lessons and not distilled.warnings:
        distilled.warnings.append("The model's answer held no lessons.")
    return distilled


# --- The session's structure --------------------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    tool: str
    arguments: str
    failed: bool
    result: str
    message_ids: tuple[int, ...]

    @property
    def described(self) -> str:
        return f"{self.tool}({self.arguments})" if self.arguments else self.tool


def _arguments(call: dict[str, Any]) -> str:
    arguments = (call.get("function") or {}).get("arguments", "")
    if isinstance(arguments, dict):
        arguments = json.dumps(arguments, sort_keys=True)
    return " ".join(str(arguments).split())[:200]


def _calls(turns: Sequence[Turn]) -> list[_Call]:
    """Each tool call with its result, in the order the results came."""
    asked: dict[str, tuple[str, str, int]] = {}
    unnamed: dict[str, tuple[str, str, int]] = {}
    for turn in turns:
        for call in turn.tool_calls or [] if turn.role == "assistant" else []:
            tool = str((call.get("function") or {}).get("name") or "")
            entry = (tool, _arguments(call), turn.pk)
            if call.get("id"):
                asked[str(call["id"])] = entry
            unnamed[tool] = entry
    calls = []
    for turn in turns:
        if turn.role != "tool":
            continue
        tool, arguments, asked_in = asked.get(turn.tool_call_id) or unnamed.get(
            turn.name, (turn.name or "tool", "", turn.pk)
        )
        failed = bool(_TOOL_FAILED.search(turn.text)) and not _NO_ERRORS.search(turn.text)
        calls.append(
            _Call(
                tool,
                arguments,
                failed,
                turn.text.strip(),
                tuple(dict.fromkeys((asked_in, turn.pk))),
            )
        )
    return calls


def _excerpt(text: str) -> str:
    return first_sentence(text, MAX_EVIDENCE_CHARS)


def session_distill(turns: Sequence[Turn], *, stated: Stated | None = None) -> Distilled:
    """The lessons of one task session, read from its structure (no model), and from what the
    agent ``stated`` when it closed it."""
    distilled = Distilled()
    requests = [turn for turn in turns if turn.role == "user" and turn.text.strip()]
    # The whole request: its first sentence is often a preamble ("I'm planning a trip.").
    task = clipped(requests[0].text, MAX_TASK_CHARS) if requests else ""
    calls = _calls(turns)
    distilled.task = task
    distilled.steps = list(dict.fromkeys(call.described for call in calls if not call.failed))
    distilled.tools = list(dict.fromkeys(call.tool for call in calls if not call.failed))
    distilled.failed_tools = list(
        dict.fromkeys(
            call.tool for call in calls if call.failed and call.tool not in distilled.tools
        )
    )

    taught: set[tuple[str, str]] = set()
    for position, call in enumerate(calls):
        if not call.failed:
            continue
        fix = next((later for later in calls[position + 1 :] if not later.failed), None)
        if fix is None or (call.described, fix.described) in taught:
            continue
        taught.add((call.described, fix.described))
        error = _excerpt(call.result)
        # The action is what changed: another tool (its arguments are the task's), or the
        # same tool called otherwise.
        action = fix.tool if fix.tool != call.tool else fix.described
        distilled.lessons.append(
            Lesson(
                lesson_type="learn",
                title=first_sentence(f"When {call.tool} fails, use {fix.tool}", MAX_TITLE_CHARS),
                content=f"{call.described} failed with: {error}\nWhat worked: {fix.described}",
                task=task,
                action=action,
                evidence=error,
                signal="tool_error",
                importance=0.7,
                credibility=0.9,
                outcome=Outcome.SUCCESS,
                source_message_ids=call.message_ids + fix.message_ids,
            )
        )
    repeated: dict[str, list[_Call]] = {}
    for call in calls:
        if call.failed:
            repeated.setdefault(call.described, []).append(call)
    for described, failures in repeated.items():
        if len(failures) < 2:
            continue
        tool = failures[0].tool
        distilled.lessons.append(
            Lesson(
                lesson_type="avoid",
                title=first_sentence(f"Do not retry {failures[0].tool} unchanged", MAX_TITLE_CHARS),
                content=f"{described} failed {len(failures)} times alike: "
                f"{_excerpt(failures[-1].result)}",
                task=task,
                # The tool failed, unless it worked in the session called otherwise.
                action=described if tool in distilled.tools else tool,
                evidence=_excerpt(failures[-1].result),
                signal="tool_error",
                importance=min(1.0, 0.5 + 0.1 * len(failures)),
                credibility=0.9,
                outcome=Outcome.FAILURE,
                source_message_ids=tuple(pk for f in failures for pk in f.message_ids),
            )
        )
    unjudged = _verdicts(turns, task, distilled, calls)
    if stated is not None and stated.outcome is not None:
        lesson = _stated_lesson(task, stated, unjudged)
        if lesson is not None:
            distilled.lessons.append(lesson)
        distilled.outcome = stated.outcome
    if distilled.outcome is None and calls:
        distilled.outcome = Outcome.FAILURE if calls[-1].failed else Outcome.SUCCESS
    return distilled


@dataclass(frozen=True)
class _Unjudged:
    """The work no user verdict has judged: since the last one (or the request), the
    assistant's last answer and the tools that worked."""

    answer: Turn | None
    worked: list[str]


def _work_described(worked: Sequence[str], answer: Turn) -> str:
    """Judged work as a lesson's action: the tools that worked, else the answer's first
    sentence, else the tools it called."""
    return ", ".join(dict.fromkeys(worked)) or (
        first_sentence(answer.text, MAX_TEXT_CHARS)
        or ", ".join(
            str((call.get("function") or {}).get("name")) for call in answer.tool_calls or []
        )
    )


def _verdicts(
    turns: Sequence[Turn], task: str, distilled: Distilled, calls: Sequence[_Call]
) -> _Unjudged:
    """User turns after the first that judge the work: a lesson about the work since the
    previous user turn (the tools that worked, else the assistant's last answer), and the
    session's outcome from the last. Returns the work after the last verdict."""
    by_result = {call.message_ids[-1]: call for call in calls}
    seen_request = False
    answer: Turn | None = None
    worked: list[str] = []
    # The same, since the last verdict (or the request) rather than the last user turn.
    answer_unjudged: Turn | None = None
    worked_unjudged: list[str] = []
    for turn in turns:
        if turn.role == "assistant" and (turn.text.strip() or turn.tool_calls):
            answer = answer_unjudged = turn
        call = by_result.get(turn.pk) if turn.role == "tool" else None
        if call is not None and not call.failed:
            worked.append(call.tool)
            worked_unjudged.append(call.tool)
        if turn.role != "user" or not turn.text.strip():
            continue
        judged, worked = worked, []
        if not seen_request:
            seen_request = True
            answer_unjudged, worked_unjudged = None, []
            continue
        verdict = verdict_read(turn.text)
        if verdict is None or answer is None:
            continue
        answer_unjudged, worked_unjudged = None, []
        distilled.outcome = verdict
        confirmed = verdict == Outcome.SUCCESS
        action = _work_described(judged, answer)
        distilled.lessons.append(
            Lesson(
                lesson_type="learn" if confirmed else "avoid",
                title=first_sentence(
                    f"{'Confirmed' if confirmed else 'Rejected'}: {action}", MAX_TITLE_CHARS
                ),
                content=f"{action}\nThe user said: {_excerpt(turn.text)}",
                task=task,
                action=action,
                evidence=_excerpt(turn.text),
                signal="user_confirmation" if confirmed else "user_critique",
                importance=0.6 if confirmed else 0.8,
                credibility=0.8,
                outcome=verdict,
                source_message_ids=(answer.pk, turn.pk),
            )
        )
    return _Unjudged(answer=answer_unjudged, worked=worked_unjudged)


_REPORTED = {
    Outcome.SUCCESS: "Reported done",
    Outcome.PARTIAL: "Reported partly done",
    Outcome.FAILURE: "Reported failed",
}


def _stated_lesson(task: str, stated: Stated, unjudged: _Unjudged) -> Lesson | None:
    """The lesson of the outcome the agent stated, about the work no verdict judged (none
    when there is no such work: the user's last verdict judged it all)."""
    answer = unjudged.answer
    if answer is None or stated.outcome is None:
        return None
    worked = stated.outcome == Outcome.SUCCESS
    action = _work_described(unjudged.worked, answer)
    evidence = _excerpt(stated.note) if stated.note.strip() else ""
    reported = f"The agent reported a {stated.outcome}" + (f": {evidence}" if evidence else ".")
    return Lesson(
        lesson_type="learn" if worked else "avoid",
        title=first_sentence(f"{_REPORTED[Outcome(stated.outcome)]}: {action}", MAX_TITLE_CHARS),
        content=f"{action}\n{reported}",
        task=task,
        action=action,
        evidence=evidence,
        # The agent's own word on its work: less sure than a user's verdict (0.8), an
        # admitted failure more telling than a claimed success.
        signal="inferred",
        importance=0.6 if worked else 0.8,
        credibility=0.6 if worked else 0.7,
        outcome=stated.outcome,
        source_message_ids=(answer.pk,),
    )


# --- A run's distill step: each session of the run, once ---------------------------------------


def _turn_text(turn: Turn) -> str:
    calls = "".join(
        f"\n  calls {(call.get('function') or {}).get('name')}"
        f"({(call.get('function') or {}).get('arguments', '')})"
        for call in turn.tool_calls or []
    )
    who = f"{turn.role}[{turn.name}]" if turn.name else turn.role
    return f"{who}: {turn.text}{calls}"


def transcript_parts(turns: Sequence[Turn], *, budget: int) -> list[str]:
    """The session's transcript in parts that fit ``budget`` tokens each (a turn longer than
    that is cut to fit)."""
    parts: list[str] = []
    lines: list[str] = []
    used = 0
    for turn in turns:
        line = _turn_text(turn)
        size = estimate_tokens(line) + 1
        if size > budget:
            line, size = line[: budget * 3 - 3], budget
        if lines and used + size > budget:
            parts.append("\n".join(lines))
            lines, used = [], 0
        lines.append(line)
        used += size
    if lines:
        parts.append("\n".join(lines))
    return parts


def stated_text(stated: Stated | None) -> str:
    """What the model reads, before each part of the transcript, of what the agent stated on
    closing the session ("" when it stated nothing)."""
    if stated is None or (stated.outcome is None and not stated.note.strip()):
        return ""
    lines = ["The agent closed this session stating:"]
    if stated.outcome is not None:
        lines.append(f"  outcome: {stated.outcome}")
    if stated.note.strip():
        lines.append(f"  note: {stated.note.strip()}")
    return "\n".join(lines)


def _distill(
    claim: Claim,
    turns: Sequence[Turn],
    llm: LLMProvider | None,
    budget: Budget,
    stated: Stated | None = None,
) -> Distilled:
    structure = session_distill(turns, stated=stated)
    if llm is None:
        return structure
    distilled = Distilled(
        outcome=structure.outcome,
        task=structure.task,
        steps=structure.steps,
        tools=structure.tools,
        failed_tools=structure.failed_tools,
    )
    # The statement heads every part: a part read alone still knows how the session ended.
    # A note longer than the window is cut to a quarter of it.
    heading = stated_text(stated)
    heading = heading[: window_budget() * 3 // 4]
    room = window_budget() - estimate_tokens(DISTILL_SYSTEM) - estimate_tokens(heading) - 1
    for part in transcript_parts(turns, budget=room):
        budget.check(step=False)
        prompt = f"{heading}\n\n{part}" if heading else part
        data = llm_call(
            claim, llm, system=DISTILL_SYSTEM, prompt=prompt, schema=DISTILL_SCHEMA, name="lessons"
        )
        parsed = lessons_parse(json.dumps(data), task=structure.task)
        distilled.lessons += parsed.lessons
        distilled.warnings += parsed.warnings
    return distilled


def _lesson_rows(
    run: LearningRun, link: LearningRunSession, distilled: Distilled, tags: dict[str, Any]
) -> list[Experience]:
    now = timezone.now()
    return [
        experience_redacted(
            Experience(
                organization_id=run.organization_id,
                client_id=run.client_id,
                end_user_id=run.end_user_id,
                task=lesson.task or distilled.task or lesson.title,
                action=lesson.action,
                outcome=lesson.outcome,
                score={"success": 1.0, "partial": 0.5}.get(lesson.outcome, 0.0),
                reason=lesson.evidence if lesson.outcome != Outcome.SUCCESS else "",
                context=distilled.context,
                filter_tags=tags,
                origin=Origin.DISTILLED,
                source_session_id=link.session_id,
                source_message_ids=list(lesson.source_message_ids),
                occurred_at=now,
                title=lesson.title[:200],
                content=lesson.content,
                lesson_type=lesson.lesson_type,
                evidence=lesson.evidence,
                signal=lesson.signal,
                importance=lesson.importance,
                credibility=lesson.credibility,
                status=LessonStatus.PENDING,
                distilled_by=run,
            ),
        )
        for lesson in distilled.lessons
    ]


def sessions_distill(
    claim: Claim, llm: LLMProvider | None, budget: Budget, deadline: float | None
) -> list[int]:
    """Distill each session of the run not distilled yet, each in its own transaction.
    Returns the ids of the lessons recorded."""
    recorded: list[int] = []
    links = LearningRunSession.objects.filter(run=claim.run, distilled_at__isnull=True)
    for link_id in links.order_by("session_id").values_list("pk", flat=True):
        link = LearningRunSession.objects.get(pk=link_id)
        stored = list(Message.objects.filter(session_id=link.session_id).order_by("position"))
        session = (
            Session.objects.filter(pk=link.session_id).values("tools", "outcome", "note").first()
            or {}
        )
        turns, note = turns_view(stored, note=session.get("note") or "")
        stated = Stated(outcome=session.get("outcome"), note=note)
        distilled = _distill(claim, turns, llm, budget, stated)
        declared = session.get("tools") or {}
        distilled.tool_descriptions = {
            tool: sensitive_redacted(str(declared[tool]))
            for tool in distilled.tools
            if declared.get(tool)
        }
        tags = stored[0].filter_tags if stored else {}
        with transaction.atomic():
            run = run_fenced(claim)
            locked = LearningRunSession.objects.select_for_update().get(pk=link_id)
            if locked.distilled_at is not None:
                continue
            rows = Experience.objects.bulk_create(_lesson_rows(run, locked, distilled, tags))
            documents_index(documents=[(EXPERIENCE_KIND, row) for row in rows], embedders=[])
            locked.distilled_at = timezone.now()
            locked.outcome = distilled.outcome or ""
            locked.save(update_fields=["distilled_at", "outcome"])
            LearningRun.objects.filter(pk=run.pk).update(
                experiences_distilled=F("experiences_distilled") + len(rows),
                heartbeat_at=timezone.now(),
            )
            ids = [row.pk for row in rows]
            if ids:
                transaction.on_commit(lambda ids=ids: experiences_embed_soon(ids))
            recorded += ids
        run_warn(claim, [f"session {link.session_id}: {warning}" for warning in distilled.warnings])
        slice_check(deadline)  # after the work: every slice does some
    return recorded
