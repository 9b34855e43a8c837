"""The curator: lessons (distilled experiences) → skill changes. Pure: it takes lessons and the
user's skills and returns operations; ``skills.learning.apply`` applies them.

- **Batches** (``batches_fill``): lessons are read in batches that fit ``window x 0.8 -
  reserve`` tokens with the prompt and the user's skills (name + description); a lesson that
  could never fit is set aside, to be pooled with the reason.
- **Deterministic curating** (``curate``): a batch's lessons are grouped by the session they
  came from into cases, and the cases clustered by the tools whose calls worked (the tools
  involved) or, for sessions that called none, by the cluster labels the caller computed from
  task similarity. Each cluster writes or extends one skill: triggers from the task phrasings,
  steps from the successful call sequence, fixes from ``learn`` lessons, pitfalls from
  ``avoid`` ones, a name and a description from them.
- **The model's operations** (``operations_parse``): ``create`` | ``edit`` | ``merge`` |
  ``deprecate`` | ``split`` | ``none``, each validated on its own (one bad item is dropped with a
  warning, the others kept).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mirix_site.common.text import clipped
from skills.content import (
    MAX_DESCRIPTION_CHARS,
    MAX_NAME_CHARS,
    MAX_PITFALLS,
    MAX_TRIGGERS,
    SkillContent,
    quoted,
)
from skills.learning.prompts import OPERATIONS

MAX_STEPS_SHOWN = 12
MAX_FIXES_SHOWN = 20
MAX_TOOL_SAID = 400  # characters of a tool's description a skill's description quotes


@dataclass(frozen=True)
class LessonView:
    """A lesson as the curator reads it (an ``Experience`` of origin distilled)."""

    id: int
    session_id: int | None
    task: str
    lesson_type: str
    title: str
    content: str
    action: str
    evidence: str
    signal: str
    outcome: str
    tools: tuple[str, ...] = ()
    steps: tuple[str, ...] = ()
    failed_tools: tuple[str, ...] = ()
    # What its tools do, as the session declared them (name → description).
    tool_descriptions: dict[str, str] = field(default_factory=dict)

    def prompt_text(self) -> str:
        """The lesson as a batch shows it to a model (and as its tokens are counted)."""
        return json.dumps(
            {
                "id": self.id,
                "task": self.task,
                "type": self.lesson_type,
                "title": self.title,
                "content": self.content,
                "evidence": self.evidence,
                "signal": self.signal,
                "outcome": self.outcome,
                "tools": list(self.tools),
                **({"tool_descriptions": self.tool_descriptions} if self.tool_descriptions else {}),
            },
            ensure_ascii=False,
        )


@dataclass(frozen=True)
class SkillView:
    """A skill of the user as the curator reads it."""

    id: int
    content: SkillContent
    tools: tuple[str, ...] = ()

    def index_line(self) -> str:
        return f"- {self.content.name}: {self.content.description}"


@dataclass
class Operation:
    """One skill change. ``target``: the skill changed (its name; None for a create);
    ``sources``: skills merged into the target (merge) or the skill split (split)."""

    kind: str
    content: SkillContent | None
    lesson_ids: tuple[int, ...]
    target: str | None = None
    sources: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    reason: str = ""
    # The outcomes of the sessions the lessons came from, by outcome.
    learned: dict[str, int] = field(default_factory=dict)
    # An edit's or merge's fields as the model named them: applied over the skill as it is
    # when the operation runs (an earlier operation of the batch may have changed it).
    changes: dict[str, Any] | None = None


# --- Batches ----------------------------------------------------------------------------------


@dataclass
class Batches:
    batches: list[list[LessonView]]
    oversized: list[tuple[LessonView, str]]


def batches_fill(
    lessons: Sequence[LessonView],
    *,
    budget: int,
    fixed_tokens: int,
    count: Callable[[str], int],
) -> Batches:
    """Lessons in order, in batches whose ``fixed_tokens`` (prompt and skills) plus lessons
    stay within ``budget``; one that alone cannot fit is set aside with the reason. The
    lessons of one session stay in one batch when they fit together."""
    room = budget - fixed_tokens
    filled = Batches(batches=[], oversized=[])
    current: list[LessonView] = []
    used = 0
    for session_lessons in _by_session(lessons):
        sizes = [count(lesson.prompt_text()) + 1 for lesson in session_lessons]
        together = sum(sizes)
        if current and used + together > room and together <= room:
            filled.batches.append(current)
            current, used = [], 0
        for lesson, size in zip(session_lessons, sizes, strict=True):
            if size > room:
                filled.oversized.append(
                    (lesson, f"{size} tokens: more than a curator batch holds ({max(room, 0)}).")
                )
                continue
            if used + size > room:
                filled.batches.append(current)
                current, used = [], 0
            current.append(lesson)
            used += size
    if current:
        filled.batches.append(current)
    return filled


def _by_session(lessons: Sequence[LessonView]) -> list[list[LessonView]]:
    groups: dict[object, list[LessonView]] = {}
    for lesson in lessons:
        groups.setdefault(lesson.session_id or f"lesson-{lesson.id}", []).append(lesson)
    return list(groups.values())


# --- Deterministic curating ----------------------------------------------------------------------

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NOT_NAME = re.compile(r"[^a-z0-9]+")
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    re.findall(
        r"\w+",
        "a an the to of for in on and or with my me i you can could would please how what is it "
        "this that be do does some any find get show tell give help want need",
    )
)


def skill_name(words: str) -> str:
    """A valid skill name from a tool's or a task's words ("ResearchHelper" →
    "research-helper")."""
    spaced = _CAMEL.sub(" ", words).lower()
    name = _NOT_NAME.sub("-", spaced).strip("-")
    name = re.sub(r"-{2,}", "-", name)[:MAX_NAME_CHARS].strip("-")
    return name or "skill"


def _task_words(task: str, limit: int = 4) -> str:
    words = [word for word in _WORD.findall(task.lower()) if word not in _STOP]
    return " ".join(words[:limit]) or task


@dataclass
class _Case:
    """The lessons of one session."""

    lessons: list[LessonView]

    @property
    def first(self) -> LessonView:
        return self.lessons[0]

    @property
    def tools(self) -> tuple[str, ...]:
        return self.first.tools

    @property
    def outcome(self) -> str:
        return self.first.outcome


def _tools_key(tools: Sequence[str]) -> tuple[str, ...]:
    return tuple(sorted({tool.lower() for tool in tools}))


def _unique(values: Sequence[str], limit: int) -> list[str]:
    seen: dict[str, str] = {}
    for value in values:
        spaced = " ".join(value.split())
        key = spaced.lower().rstrip(".!?")
        if spaced and key not in seen:
            seen[key] = spaced
    return list(seen.values())[-limit:]


def _instructions(
    name: str, tools: Sequence[str], steps: Sequence[str], fixes: Sequence[str]
) -> str:
    lines = [f"# {name}", ""]
    if tools:
        lines += ["## Steps"]
        for number, tool in enumerate(tools, 1):
            example = next((step for step in steps if step.startswith(f"{tool}(")), "")
            # A call as a session made it: its arguments are data, quoted.
            shown = f" — as a session called it: {quoted(example)}" if example else ""
            lines.append(f"{number}. Call `{tool}` with the request's details{shown}.")
        lines.append("")
    if fixes:
        lines += ["## Fixes that worked", *(f"- {fix}" for fix in fixes[:MAX_FIXES_SHOWN]), ""]
    if len(lines) == 2:
        lines += ["Follow what worked in the sessions listed under *When to use*.", ""]
    return "\n".join(lines).rstrip() + "\n"


def _description(tools: Sequence[str], triggers: Sequence[str], described: dict[str, str]) -> str:
    """What the skill does (its first tool's description, when the sessions declared it) and
    when to use it (the requests it was learned from)."""
    examples = "; ".join(f"“{trigger}”" for trigger in triggers[:3])
    using = f" with {', '.join(f'`{tool}`' for tool in tools)}" if tools else ""
    does = next((described[tool] for tool in tools if described.get(tool)), "")
    when = f"Handles requests like {examples}{using}. Use it when a task asks for the same."
    return clipped(
        f"{clipped(does, MAX_TOOL_SAID)} {when}" if does else when, MAX_DESCRIPTION_CHARS
    )


def _said(lesson: LessonView) -> str:
    """A lesson's title, and what its evidence (a tool's output, a user's or the agent's
    words) said, quoted
    as data: a skill is loaded as instructions, and what a tool returned must not become one."""
    if not lesson.evidence:
        return lesson.title
    if lesson.signal.startswith("user_"):
        source = "the user said"
    elif lesson.signal == "tool_error":
        source = "the tool said"
    else:  # self-correction, or the agent's report on closing the session (inferred)
        source = "the agent said"
    return f"{lesson.title} ({source}: {quoted(lesson.evidence)})"


def _fixes(lessons: Sequence[LessonView]) -> list[str]:
    return [
        _said(lesson)
        for lesson in lessons
        if lesson.lesson_type == "learn" and lesson.signal == "tool_error"
    ]


def _pitfalls(lessons: Sequence[LessonView]) -> list[str]:
    return [_said(lesson) for lesson in lessons if lesson.lesson_type == "avoid"]


def _cluster_content(
    cases: Sequence[_Case], existing: SkillView | None, taken: set[str]
) -> tuple[SkillContent, tuple[str, ...]]:
    lessons = [lesson for case in cases for lesson in case.lessons]
    tools_seen = Counter(tool for case in cases for tool in case.tools)
    tools = tuple(existing.tools if existing else ()) + tuple(
        tool for tool, _ in tools_seen.most_common() if not existing or tool not in existing.tools
    )
    steps = [step for case in cases for step in case.first.steps]
    described = {
        tool: text for lesson in lessons for tool, text in lesson.tool_descriptions.items()
    }
    before = existing.content if existing else None
    triggers = _unique(
        [*(before.triggers if before else ()), *(case.first.task for case in cases)],
        MAX_TRIGGERS,
    )
    pitfalls = _unique([*(before.pitfalls if before else ()), *_pitfalls(lessons)], MAX_PITFALLS)
    if before is not None:
        name = before.name
        old_fixes = [line[2:] for line in before.instructions.splitlines() if line.startswith("- ")]
    else:
        name = _free_name(skill_name(tools[0] if tools else _task_words(triggers[0])), taken)
        old_fixes = []
    fixes = _unique([*old_fixes, *_fixes(lessons)], MAX_FIXES_SHOWN)
    content = SkillContent(
        name=name,
        description=_description(tools, triggers, described),
        triggers=tuple(triggers),
        instructions=_instructions(name, tools[:MAX_STEPS_SHOWN], steps, fixes),
        pitfalls=tuple(pitfalls),
    )
    return content, tools


def _free_name(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    for number in range(2, 1000):
        suffix = f"-{number}"
        candidate = name[: MAX_NAME_CHARS - len(suffix)].rstrip("-") + suffix
        if candidate not in taken:
            return candidate
    raise ValueError(f"no free skill name for {name}")


def curate(
    lessons: Sequence[LessonView],
    skills: Sequence[SkillView],
    *,
    task_labels: dict[int, int] | None = None,
    skill_labels: dict[int, int] | None = None,
) -> list[Operation]:
    """The skill changes a batch of lessons calls for, without a model (see the module).
    ``task_labels`` clusters the sessions that called no tool (session id → a label from task
    similarity) and ``skill_labels`` names the skill of such a label that exists (label →
    skill id)."""
    cases = [_Case(group) for group in _by_session(lessons)]
    by_tools = {_tools_key(skill.tools): skill for skill in skills if skill.tools}
    by_id = {skill.id: skill for skill in skills}
    clusters: dict[object, list[_Case]] = {}
    for case in cases:
        key: object = _tools_key(case.tools)
        if not case.tools:
            key = ("task", (task_labels or {}).get(case.first.session_id or -case.first.id))
        clusters.setdefault(key, []).append(case)
    taken = {skill.content.name for skill in skills}
    operations = []
    for key, members in clusters.items():
        if isinstance(key, tuple) and key[:1] == ("task",):
            skill_id = (skill_labels or {}).get(key[1]) if key[1] is not None else None
            existing = by_id.get(skill_id) if skill_id is not None else None
        else:
            existing = by_tools.get(key)
        content, tools = _cluster_content(members, existing, taken)
        taken.add(content.name)
        learned = Counter(case.outcome for case in members if case.outcome)
        operations.append(
            Operation(
                kind="edit" if existing else "create",
                content=content,
                target=existing.content.name if existing else None,
                lesson_ids=tuple(lesson.id for case in members for lesson in case.lessons),
                tools=tools,
                reason=f"{len(members)} session(s) "
                + (f"using {', '.join(tools)}" if tools else "with similar tasks"),
                learned=dict(learned),
            )
        )
    return operations


# --- The model's operations ----------------------------------------------------------------------


def curator_prompt(skills: Sequence[SkillView], lessons: Sequence[LessonView]) -> str:
    index = "\n".join(skill.index_line() for skill in skills) or "(none yet)"
    shown = "\n".join(lesson.prompt_text() for lesson in lessons)
    return (
        f"Existing skills:\n{index}\n\nNew lessons (one JSON object per line):\n{shown}\n\n"
        'Answer {"operations": [...]}: create (name, description, triggers, instructions, '
        "pitfalls, lesson_ids), edit (skill, the fields that change, lesson_ids), merge "
        "(skill: the one kept, sources: those merged into it, the kept one's new fields, "
        "lesson_ids), deprecate (skill, reason, lesson_ids), split (skill, parts: a list of "
        "skills to create in its place, lesson_ids), none (lesson_ids, reason)."
    )


def _strings(value: Any, limit: int) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError("must be a list of strings")
    return tuple(_unique(value, limit))


def _changes(item: dict[str, Any]) -> dict[str, Any]:
    """The skill fields an item names."""
    changes: dict[str, Any] = {}
    for name in ("name", "description", "instructions"):
        if isinstance(item.get(name), str) and item[name].strip():
            changes[name] = item[name].strip()
    for name, limit in (("triggers", MAX_TRIGGERS), ("pitfalls", MAX_PITFALLS)):
        listed = _strings(item.get(name), limit)
        if listed is not None:
            changes[name] = list(listed)
    return changes


def content_over(base: SkillContent, changes: dict[str, Any]) -> SkillContent:
    return SkillContent.from_snapshot({**base.snapshot(), **changes})


def _content(item: dict[str, Any], base: SkillContent | None) -> SkillContent:
    """The content an item describes, over ``base`` (an edit names only what changes)."""
    values: dict[str, Any] = base.snapshot() if base is not None else {}
    values.update(_changes(item))
    if "name" not in values or "description" not in values:
        raise ValueError("a new skill needs a name and a description")
    content = SkillContent.from_snapshot(values)
    errors = content.errors()
    if errors:
        raise ValueError("; ".join(f"{key}: {' '.join(text)}" for key, text in errors.items()))
    return content


def operations_parse(
    data: Any, *, skills: Sequence[SkillView], lesson_ids: Sequence[int]
) -> tuple[list[Operation], list[str]]:
    """The valid operations of a model's answer and a warning for each dropped item. An
    operation must name the batch's lessons only and skills that exist (a create or split
    part: a name no other skill has)."""
    warnings: list[str] = []
    items = data.get("operations") if isinstance(data, dict) else data
    if not isinstance(items, list):
        return [], ["The curator's answer held no list of operations."]
    by_name = {skill.content.name: skill for skill in skills}
    allowed = set(lesson_ids)
    created: set[str] = set()
    operations: list[Operation] = []
    for position, item in enumerate(items):
        try:
            operations.extend(_operation_read(item, by_name, allowed, created))
        except (ValueError, TypeError, KeyError) as error:
            warnings.append(f"Operation {position} dropped: {error}.")
    return operations, warnings


def _named(by_name: dict[str, SkillView], name: Any) -> SkillView:
    if not isinstance(name, str) or name not in by_name:
        raise ValueError(f"no skill named {name!r}")
    return by_name[name]


def _operation_read(
    item: Any, by_name: dict[str, SkillView], allowed: set[int], created: set[str]
) -> list[Operation]:
    if not isinstance(item, dict):
        raise ValueError("not an object")
    kind = item.get("op")
    if kind not in OPERATIONS:
        raise ValueError(f"unknown op {kind!r}")
    ids = item.get("lesson_ids") or []
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise ValueError("lesson_ids must be a list of integers")
    if set(ids) - allowed:
        raise ValueError(f"lessons {sorted(set(ids) - allowed)} are not in this batch")
    lessons = tuple(dict.fromkeys(ids))
    reason = str(item.get("reason") or "")[:500]

    def fresh(content: SkillContent) -> SkillContent:
        if content.name in by_name or content.name in created:
            raise ValueError(f"a skill named {content.name!r} exists")
        created.add(content.name)
        return content

    if kind == "none":
        return [Operation(kind="none", content=None, lesson_ids=lessons, reason=reason)]
    if kind == "create":
        return [Operation(kind="create", content=fresh(_content(item, None)), lesson_ids=lessons)]
    target = _named(by_name, item.get("skill"))
    if kind == "deprecate":
        return [
            Operation(
                kind="deprecate",
                content=None,
                target=target.content.name,
                lesson_ids=lessons,
                reason=reason,
            )
        ]
    if kind == "edit":
        content = _content(item, target.content)
        if content.name != target.content.name and content.name in by_name:
            raise ValueError(f"a skill named {content.name!r} exists")
        return [
            Operation(
                kind="edit",
                content=content,
                target=target.content.name,
                lesson_ids=lessons,
                reason=reason,
                changes=_changes(item),
            )
        ]
    if kind == "merge":
        sources = tuple(_named(by_name, name).content.name for name in item.get("sources") or [])
        sources = tuple(name for name in sources if name != target.content.name)
        if not sources:
            raise ValueError("a merge names the skills merged into the one kept")
        return [
            Operation(
                kind="merge",
                content=_content(item, target.content),
                target=target.content.name,
                sources=sources,
                lesson_ids=lessons,
                reason=reason,
                changes=_changes(item),
            )
        ]
    parts = item.get("parts")
    if not isinstance(parts, list) or len(parts) < 2:
        raise ValueError("a split names at least two parts")
    contents = [fresh(_content(part, None)) for part in parts if isinstance(part, dict)]
    return [
        Operation(
            kind="split",
            content=None,
            target=target.content.name,
            lesson_ids=lessons,
            reason=reason,
        ),
        *(
            Operation(kind="create", content=content, lesson_ids=(), sources=(target.content.name,))
            for content in contents
        ),
    ]
