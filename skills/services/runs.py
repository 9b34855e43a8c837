"""Executing a learning run: claim it, distill its sessions into lessons, curate the user's
waiting lessons into skill versions, finish it. Durable and repeatable:

- **Claim**: a conditional update takes a run that is queued, or running with a heartbeat
  older than ``LEARNING_RUN_STALE_AFTER`` (its worker died), and counts the attempt. A user's
  runs never overlap: the partial unique index "one running run per user" refuses a second
  claim, which leaves the run queued for the beat to publish again.
- **Fencing**: every write of the run happens in a transaction that first locks the run row
  and checks that it is still running under this attempt; a worker whose claim was taken over
  stops at its next write (``RunLostError``) instead of writing beside the new one.
- **Once only**: a session's lessons are recorded in the transaction that marks it distilled;
  an operation's version in the one that marks its lessons consumed, under a key derived from
  the run, the operation and its lessons. A run claimed again after a kill redoes nothing
  that committed.
- **Caps**: ``CURATOR_MAX_STEPS`` batches and ``CURATOR_MAX_TOKENS_PER_RUN`` tokens (in and out,
  distiller and curator); a run reaching one ends ``budget_exhausted``, its unread lessons
  pooled for the next run. A model that refuses the prompt's size ends it ``context_limit``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from mirix_site.providers.embeddings import EmbeddingProvider, cosines
from mirix_site.providers.llm import LLMPermanentError, LLMProvider, estimate_tokens
from mirix_site.search.index import documents_index
from sessions.models import Message, Session
from sessions.sensitive import sensitive_redacted
from skills.curator import (
    CURATOR_SYSTEM,
    OPERATIONS_SCHEMA,
    LessonView,
    Operation,
    SkillView,
    batches_fill,
    content_over,
    curate,
    curator_prompt,
    operations_parse,
)
from skills.distiller import Distilled, Turn, lessons_parse, session_distill, turns_view
from skills.models import (
    SERVED_STATUSES,
    Experience,
    LearningRun,
    LearningRunSession,
    LessonStatus,
    Origin,
    Outcome,
    Skill,
    SkillVersion,
)
from skills.search import EXPERIENCE_KIND
from skills.services.experiences import experience_redacted
from skills.services.grouping import action_key
from skills.services.learning import learning_run_publish, learning_run_queued
from skills.services.skills import (
    REWRITE_REVIEW_SHARE,
    Provenance,
    SkillConflictError,
    SkillContent,
    SkillInputError,
    rewrite_share,
    skill_version_write,
    skills_embed,
)

logger = logging.getLogger(__name__)

WAITING = (LessonStatus.PENDING, LessonStatus.POOLED)
MAX_WARNINGS = 200


class RunLostError(Exception):
    """Another worker claimed the run again: this one stops without writing."""


class BudgetExhaustedError(Exception):
    """The run reached its step or token cap."""


class ContextLimitError(Exception):
    """The model refused a prompt for its size."""


class SliceDoneError(Exception):
    """The run used its time slice; what it did is committed, the rest waits for the next."""


def _slice_check(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise SliceDoneError


@dataclass
class Claim:
    run: LearningRun
    attempt: int


def learning_run_claim(*, run_id: int) -> Claim | None:
    """Take the run if it is queued or its worker stopped beating; None when it is not to be
    taken (finished, held by a live worker, or another run of the user is running)."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.LEARNING_RUN_STALE_AFTER)
    claimable = Q(state=LearningRun.State.QUEUED) | Q(
        state=LearningRun.State.RUNNING, heartbeat_at__lt=stale
    )
    try:
        with transaction.atomic():
            taken = LearningRun.objects.filter(claimable, pk=run_id).update(
                state=LearningRun.State.RUNNING,
                attempts=F("attempts") + 1,
                heartbeat_at=now,
                started_at=Coalesce(F("started_at"), now),
            )
    except IntegrityError:  # another run of the user holds the "running" slot
        return None
    if not taken:
        return None
    run = LearningRun.objects.get(pk=run_id)
    return Claim(run=run, attempt=run.attempts)


def _fenced(claim: Claim) -> LearningRun:
    """The run, locked, if this claim still holds it (inside a transaction)."""
    run = LearningRun.objects.select_for_update().get(pk=claim.run.pk)
    if run.state != LearningRun.State.RUNNING or run.attempts != claim.attempt:
        raise RunLostError(run.pk)
    return run


def _beat(claim: Claim, **counters: int) -> None:
    """Keep the claim fresh, adding to the run's counters."""
    with transaction.atomic():
        _fenced(claim)
        LearningRun.objects.filter(pk=claim.run.pk).update(
            heartbeat_at=timezone.now(), **{name: F(name) + n for name, n in counters.items()}
        )


def _warn(claim: Claim, warnings: Sequence[str]) -> None:
    if not warnings:
        return
    with transaction.atomic():
        run = _fenced(claim)
        run.warnings = (run.warnings + list(warnings))[-MAX_WARNINGS:]
        run.save(update_fields=["warnings"])


class _Budget:
    """The run's caps, read from its counters as it goes."""

    def __init__(self, claim: Claim) -> None:
        self.claim = claim

    def spent(self) -> tuple[int, int]:
        run = LearningRun.objects.only("steps", "input_tokens", "output_tokens").get(
            pk=self.claim.run.pk
        )
        return run.steps, run.input_tokens + run.output_tokens

    def check(self, *, step: bool) -> None:
        steps, tokens = self.spent()
        if tokens >= settings.CURATOR_MAX_TOKENS_PER_RUN:
            raise BudgetExhaustedError(
                f"{tokens} tokens spent, the cap is {settings.CURATOR_MAX_TOKENS_PER_RUN}."
            )
        if step and steps >= settings.CURATOR_MAX_STEPS:
            raise BudgetExhaustedError(
                f"{steps} curator steps, the cap is {settings.CURATOR_MAX_STEPS}."
            )


def _llm_call(
    claim: Claim, llm: LLMProvider, *, system: str, prompt: str, schema: dict[str, Any], name: str
) -> dict[str, Any]:
    try:
        result = llm.structured(system=system, prompt=prompt, schema=schema, schema_name=name)
    except LLMPermanentError as error:
        if "context" in str(error).lower() or "too long" in str(error).lower():
            raise ContextLimitError(str(error)) from error
        raise
    _beat(
        claim,
        llm_calls=1,
        input_tokens=result.input_tokens or estimate_tokens(system + prompt),
        output_tokens=result.output_tokens or estimate_tokens(json.dumps(result.data)),
    )
    return result.data


def _window_budget() -> int:
    return int(settings.LLM_CONTEXT_WINDOW * 0.8) - settings.CURATOR_RESERVE_TOKENS


# --- Distilling ---------------------------------------------------------------------------------

DISTILL_SYSTEM = (
    "You read an AI agent's task session (its user's request, its tool calls and their "
    "results, the user's reactions) and write down what it teaches for next time, as lessons: "
    "`learn` (what worked, e.g. the fix after a tool error) or `avoid` (what failed or the user "
    "rejected). Each lesson: type, title (one line), content (the lesson, self-contained), task "
    "(the kind of request it applies to), action (what to do or not do), evidence (a short "
    "quote from the session), signal (tool_error, user_critique, user_confirmation, "
    "self_correction or inferred), importance and credibility in [0, 1], outcome (success, "
    "failure or partial). Only lessons the session supports; none is a valid answer."
)

DISTILL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"lessons": {"type": "array", "items": {"type": "object"}}},
    "required": ["lessons"],
}


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


def _distill(
    claim: Claim, turns: Sequence[Turn], llm: LLMProvider | None, budget: _Budget
) -> Distilled:
    structure = session_distill(turns)
    if llm is None:
        return structure
    distilled = Distilled(
        outcome=structure.outcome,
        task=structure.task,
        steps=structure.steps,
        tools=structure.tools,
        failed_tools=structure.failed_tools,
    )
    room = _window_budget() - estimate_tokens(DISTILL_SYSTEM)
    for part in transcript_parts(turns, budget=room):
        budget.check(step=False)
        data = _llm_call(
            claim, llm, system=DISTILL_SYSTEM, prompt=part, schema=DISTILL_SCHEMA, name="lessons"
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


def _sessions_distill(
    claim: Claim, llm: LLMProvider | None, budget: _Budget, deadline: float | None
) -> list[int]:
    """Distill each session of the run not distilled yet, each in its own transaction.
    Returns the ids of the lessons recorded."""
    recorded: list[int] = []
    links = LearningRunSession.objects.filter(run=claim.run, distilled_at__isnull=True)
    for link_id in links.order_by("session_id").values_list("pk", flat=True):
        link = LearningRunSession.objects.get(pk=link_id)
        stored = list(Message.objects.filter(session_id=link.session_id).order_by("position"))
        turns = turns_view(stored)
        distilled = _distill(claim, turns, llm, budget)
        declared = (
            Session.objects.filter(pk=link.session_id).values_list("tools", flat=True).first() or {}
        )
        distilled.tool_descriptions = {
            tool: sensitive_redacted(str(declared[tool]))
            for tool in distilled.tools
            if declared.get(tool)
        }
        tags = stored[0].filter_tags if stored else {}
        with transaction.atomic():
            run = _fenced(claim)
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
                from skills.embedding_queue import experiences_embed_soon

                transaction.on_commit(lambda ids=ids: experiences_embed_soon(ids))
            recorded += ids
        _warn(claim, [f"session {link.session_id}: {warning}" for warning in distilled.warnings])
        _slice_check(deadline)  # after the work: every slice does some
    return recorded


# --- Curating -----------------------------------------------------------------------------------


def _lesson_view(row: Experience) -> LessonView:
    context = row.context if isinstance(row.context, dict) else {}

    def listed(key: str) -> tuple[str, ...]:
        value = context.get(key)
        return tuple(str(item) for item in value) if isinstance(value, list) else ()

    described = context.get("tool_descriptions")
    if not isinstance(described, dict):
        described = {}
    return LessonView(
        id=row.pk,
        session_id=row.source_session_id,
        task=row.task,
        lesson_type=row.lesson_type,
        title=row.title,
        content=row.content,
        action=row.action,
        evidence=row.evidence,
        signal=row.signal,
        outcome=row.outcome,
        tools=listed("tools"),
        steps=listed("steps"),
        failed_tools=listed("failed_tools"),
        tool_descriptions={str(tool): str(text) for tool, text in described.items()},
    )


def _skills(run: LearningRun) -> list[Skill]:
    return list(
        Skill.objects.filter(client_id=run.client_id, end_user_id=run.end_user_id)
        .exclude(status=Skill.Status.DELETED)
        .order_by("pk")
    )


def _skill_view(skill: Skill) -> SkillView:
    return SkillView(id=skill.pk, content=SkillContent.of(skill), tools=tuple(skill.tools))


def task_clusters(
    *,
    tasks: dict[int, str],
    skills: Sequence[SkillView],
    embed: Callable[[list[str]], list[list[float]]] | None,
    threshold: float | None,
) -> tuple[dict[int, int], dict[int, int]]:
    """Cluster the sessions that called no tool by their tasks (session id → label), each
    joining an existing tool-less skill whose text it is as near as ``threshold`` to, else the
    first earlier task that near, else a cluster of its own; without a model or a threshold,
    tasks cluster by their normalized text. Returns the labels and label → skill id."""
    toolless = [skill for skill in skills if not skill.tools]
    ids = list(tasks)
    if not ids:
        return {}, {}
    if embed is None or threshold is None:
        keys: dict[str, int] = {}
        skill_keys = {
            action_key(trigger): skill.id
            for skill in toolless
            for trigger in skill.content.triggers
        }
        labels, skill_labels = {}, {}
        for session_id in ids:
            key = action_key(tasks[session_id])
            label = keys.setdefault(key, len(keys))
            labels[session_id] = label
            if key in skill_keys:
                skill_labels[label] = skill_keys[key]
        return labels, skill_labels
    vectors = embed([tasks[session_id] for session_id in ids])
    skill_vectors = (
        embed([f"{s.content.description}\n" + "\n".join(s.content.triggers) for s in toolless])
        if toolless
        else []
    )
    to_skills = cosines(vectors, skill_vectors) if toolless else None
    among = cosines(vectors, vectors)
    labels: dict[int, int] = {}
    skill_labels: dict[int, int] = {}
    leaders: list[int] = []  # the index of each label's first task
    for index, session_id in enumerate(ids):
        if to_skills is not None and to_skills[index].max() >= threshold:
            skill = toolless[int(to_skills[index].argmax())]
            label = next((lab for lab, sid in skill_labels.items() if sid == skill.id), None)
            if label is None:
                label = len(leaders)
                leaders.append(index)
                skill_labels[label] = skill.id
            labels[session_id] = label
            continue
        near = [lab for lab, leader in enumerate(leaders) if among[index, leader] >= threshold]
        if near:
            labels[session_id] = max(near, key=lambda lab: among[index, leaders[lab]])
        else:
            labels[session_id] = len(leaders)
            leaders.append(index)
    return labels, skill_labels


def _operation_key(run: LearningRun, operation: Operation, part: str = "") -> str:
    name = operation.content.name if operation.content is not None else ""
    what = f"{run.pk}:{operation.kind}:{operation.target or ''}:{name}:{part}:" + ",".join(
        str(i) for i in sorted(operation.lesson_ids)
    )
    return hashlib.sha256(what.encode()).hexdigest()


def _consume(run: LearningRun, lesson_ids: Sequence[int]) -> int:
    return Experience.objects.filter(pk__in=lesson_ids, status__in=WAITING).update(
        status=LessonStatus.CONSUMED, consumed_by=run, pool_reason=""
    )


def _status_version(
    *,
    run: LearningRun,
    skill: Skill,
    status: str,
    operation: Operation,
    note: str,
    key: str,
    embedders: Sequence[EmbeddingProvider],
) -> None:
    skill_version_write(
        owner=skill.owner_ids,
        skill=skill,
        content=SkillContent.of(skill),
        provenance=Provenance(
            author=SkillVersion.Author.CURATOR,
            operation=operation.kind,
            run=run,
            experience_ids=operation.lesson_ids,
            operation_key=key,
            note=note,
        ),
        status=status,
        embedders=embedders,
    )


def _tool_descriptions(operation: Operation) -> dict[str, str]:
    """What the tools of the operation's lessons do, as their sessions declared it (of the
    operation's tools when it names them)."""
    described: dict[str, str] = {}
    contexts = Experience.objects.filter(pk__in=operation.lesson_ids).order_by("pk")
    for context in contexts.values_list("context", flat=True):
        if isinstance(context, dict) and isinstance(context.get("tool_descriptions"), dict):
            described.update(context["tool_descriptions"])
    if operation.tools:
        described = {tool: text for tool, text in described.items() if tool in operation.tools}
    return described


def _apply(claim: Claim, operation: Operation) -> list[str]:
    """Apply one operation in one transaction, consuming the lessons it names that still wait;
    returns warnings. An operation applied before (a run claimed again) finds its version by
    its key and writes nothing. Skills are indexed for BM25 here; their vectors are written for
    the whole batch at once (``_batch_embed``)."""
    embedders: Sequence[EmbeddingProvider] = []
    warnings: list[str] = []
    with transaction.atomic():
        run = _fenced(claim)
        waiting = list(
            Experience.objects.select_for_update()
            .filter(pk__in=operation.lesson_ids, status__in=WAITING)
            .values_list("pk", flat=True)
        )
        by_name = {skill.name: skill for skill in _skills(run)}
        described = _tool_descriptions(operation)
        counters: dict[str, int] = {}
        key = _operation_key(run, operation)
        target = by_name.get(operation.target) if operation.target else None
        provenance = Provenance(
            author=SkillVersion.Author.CURATOR,
            operation=operation.kind,
            run=run,
            experience_ids=operation.lesson_ids,
            operation_key=key,
            note=operation.reason,
            learned=operation.learned,
        )
        try:
            with transaction.atomic():
                if operation.kind == "create" and operation.content is not None:
                    written = skill_version_write(
                        owner=run.owner_ids,
                        skill=None,
                        content=operation.content,
                        provenance=provenance,
                        embedders=embedders,
                    )
                    if written.created:
                        Skill.objects.filter(pk=written.skill.pk).update(
                            tools=list(operation.tools), tool_descriptions=described
                        )
                        counters["skills_created"] = 1
                elif operation.kind in ("edit", "merge") and target and operation.content:
                    content = operation.content
                    if operation.changes is not None:  # over the skill as it is now
                        content = content_over(SkillContent.of(target), operation.changes)
                    share = rewrite_share(SkillContent.of(target), content)
                    review = share > REWRITE_REVIEW_SHARE
                    if review:
                        provenance = replace(
                            provenance,
                            note=f"{operation.reason} (rewrote {share:.0%} of the skill: "
                            "flagged for review)".strip(),
                        )
                    written = skill_version_write(
                        owner=run.owner_ids,
                        skill=target,
                        content=content,
                        provenance=provenance,
                        embedders=embedders,
                        needs_review=review,
                    )
                    if written.created and (operation.tools or described):
                        Skill.objects.filter(pk=target.pk).update(
                            tools=list(dict.fromkeys([*target.tools, *operation.tools])),
                            tool_descriptions={**target.tool_descriptions, **described},
                        )
                    counters["skills_edited" if operation.kind == "edit" else "skills_merged"] = 1
                    for position, source in enumerate(operation.sources):
                        if source in by_name:
                            _status_version(
                                run=run,
                                skill=by_name[source],
                                status=Skill.Status.DEPRECATED,
                                operation=operation,
                                note=f"Merged into {target.name}.",
                                key=_operation_key(run, operation, f"m{position}"),
                                embedders=embedders,
                            )
                elif operation.kind in ("deprecate", "split") and target:
                    _status_version(
                        run=run,
                        skill=target,
                        status=Skill.Status.DEPRECATED,
                        operation=operation,
                        note=operation.reason or f"{operation.kind} by the curator",
                        key=key,
                        embedders=embedders,
                    )
                    counters["skills_deprecated"] = 1
        except (SkillInputError, SkillConflictError) as error:
            warnings.append(f"{operation.kind} {operation.target or ''}: {error}")
        consumed = _consume(run, waiting)
        LearningRun.objects.filter(pk=run.pk).update(
            heartbeat_at=timezone.now(),
            experiences_consumed=F("experiences_consumed") + consumed,
            **{name: F(name) + n for name, n in counters.items()},
        )
    return warnings


def _batch_embed(
    claim: Claim, embedders: Sequence[EmbeddingProvider], *, since: datetime | None
) -> None:
    """Embed, in one call per model, the served skills this run wrote versions of since
    ``since`` (None: ever; a claim taken over embeds what the one before it may not have lived
    to; embedding a skill again writes the same vectors)."""
    versions = SkillVersion.objects.filter(run_id=claim.run.pk)
    if since is not None:
        versions = versions.filter(created_at__gte=since)
    skill_ids = list(
        Skill.objects.filter(
            pk__in=versions.values("skill_id"), status__in=SERVED_STATUSES
        ).values_list("pk", flat=True)
    )
    if skill_ids and embedders:
        skills_embed(skill_ids=skill_ids, embedders=embedders)
    _beat(claim)


def _pool(claim: Claim, lessons: Sequence[tuple[int, str]]) -> None:
    with transaction.atomic():
        run = _fenced(claim)
        pooled = 0
        for lesson_id, reason in lessons:
            pooled += Experience.objects.filter(pk=lesson_id, status__in=WAITING).update(
                status=LessonStatus.POOLED, pool_reason=reason
            )
        LearningRun.objects.filter(pk=run.pk).update(
            experiences_pooled=F("experiences_pooled") + pooled
        )


def _waiting_lessons(run: LearningRun) -> list[Experience]:
    """The user's lessons no curator has placed: those pooled by earlier runs, then new ones."""
    return list(
        Experience.objects.filter(
            client_id=run.client_id, end_user_id=run.end_user_id, status__in=WAITING
        ).order_by("pk")
    )


def _curate(
    *,
    claim: Claim,
    llm: LLMProvider | None,
    embedder: EmbeddingProvider | None,
    embedders: Sequence[EmbeddingProvider],
    budget: _Budget,
    threshold: float | None,
    deadline: float | None,
) -> None:
    views = [_lesson_view(row) for row in _waiting_lessons(claim.run)]
    skills = [_skill_view(skill) for skill in _skills(claim.run)]
    fixed = estimate_tokens(CURATOR_SYSTEM + curator_prompt(skills, []))
    filled = batches_fill(views, budget=_window_budget(), fixed_tokens=fixed, count=estimate_tokens)
    _pool(claim, [(lesson.id, reason) for lesson, reason in filled.oversized])
    for position, batch in enumerate(filled.batches):
        if position:
            _slice_check(deadline)
        try:
            budget.check(step=True)
        except BudgetExhaustedError as error:
            rest = [lesson for later in filled.batches[position:] for lesson in later]
            _pool(claim, [(lesson.id, f"Waits for the next run: {error}") for lesson in rest])
            raise
        skills = [_skill_view(skill) for skill in _skills(claim.run)]
        warnings: list[str] = []
        if llm is None:
            tasks = {
                lesson.session_id or -lesson.id: lesson.task for lesson in batch if not lesson.tools
            }
            labels, skill_labels = task_clusters(
                tasks=tasks,
                skills=skills,
                embed=embedder.embed if embedder is not None else None,
                threshold=threshold,
            )
            operations = curate(batch, skills, task_labels=labels, skill_labels=skill_labels)
        else:
            data = _llm_call(
                claim,
                llm,
                system=CURATOR_SYSTEM,
                prompt=curator_prompt(skills, batch),
                schema=OPERATIONS_SCHEMA,
                name="skill_operations",
            )
            operations, warnings = operations_parse(
                data, skills=skills, lesson_ids=[lesson.id for lesson in batch]
            )
        _beat(claim, steps=1)
        began = None if position == 0 and claim.attempt > 1 else timezone.now()
        for number, operation in enumerate(operations):
            if number:
                # What is left of the batch waits: its lessons are still unplaced.
                _slice_check(deadline)
            warnings += _apply(claim, operation)
        _batch_embed(claim, embedders, since=began)
        named = {lesson_id for operation in operations for lesson_id in operation.lesson_ids}
        unplaced = [lesson.id for lesson in batch if lesson.id not in named]
        _pool(
            claim, [(lesson_id, "The curator placed it in no operation.") for lesson_id in unplaced]
        )
        _warn(claim, warnings)


def _finish(claim: Claim, state: str, error: str = "") -> LearningRun:
    """End the run. A run of the user queued meanwhile was sent to a worker that found this
    one running and left it: it is sent again once this end commits (it waited for the beat,
    up to a minute and more, before)."""
    with transaction.atomic():
        run = _fenced(claim)
        run.state, run.error = state, error[:2000]
        run.finished_at = run.heartbeat_at = timezone.now()
        run.save(update_fields=["state", "error", "finished_at", "heartbeat_at"])
        waiting = learning_run_queued(client_id=run.client_id, end_user_id=run.end_user_id)
        if waiting is not None:
            learning_run_publish(waiting)
    return run


def learning_run_fail(claim: Claim, error: str) -> LearningRun:
    """End the run as failed, saying why (an error the run cannot get past)."""
    return _finish(claim, LearningRun.State.FAILED, error)


def learning_run_release(claim: Claim) -> bool:
    """Put the run back in the queue (a transient failure: the task retries). False when a
    newer run of the user is queued already: the run stays running and the beat claims it
    again once its heartbeat is stale."""
    try:
        with transaction.atomic():
            _fenced(claim)
            LearningRun.objects.filter(pk=claim.run.pk).update(state=LearningRun.State.QUEUED)
    except IntegrityError:
        return False
    return True


def learning_run_execute(
    *,
    claim: Claim,
    llm: LLMProvider | None,
    embedders: Sequence[EmbeddingProvider],
    threshold: float | None,
    deadline: float | None = None,
) -> LearningRun:
    """Run a claimed run to its end (see the module). Raises RunLostError when another worker
    took it over, SliceDoneError when ``deadline`` (a ``time.monotonic()``) passed between two
    steps; transient provider errors propagate for the task to retry."""
    budget = _Budget(claim)
    try:
        _sessions_distill(claim, llm, budget, deadline)
        _curate(
            deadline=deadline,
            claim=claim,
            llm=llm,
            embedder=embedders[0] if embedders else None,
            embedders=embedders,
            budget=budget,
            threshold=threshold,
        )
    except BudgetExhaustedError as error:
        return _finish(claim, LearningRun.State.BUDGET_EXHAUSTED, str(error))
    except ContextLimitError as error:
        return _finish(claim, LearningRun.State.CONTEXT_LIMIT, str(error))
    except LLMPermanentError as error:
        return _finish(claim, LearningRun.State.FAILED, f"The model failed: {error}")
    return _finish(claim, LearningRun.State.SUCCEEDED)


def learning_runs_due(*, queued_older_than: timedelta) -> list[int]:
    """Runs the beat publishes: queued ones waiting longer than ``queued_older_than`` (their
    message may be lost) and running ones whose heartbeat is stale."""
    now = timezone.now()
    return list(
        LearningRun.objects.filter(
            Q(state=LearningRun.State.QUEUED, created_at__lt=now - queued_older_than)
            | Q(
                state=LearningRun.State.RUNNING,
                heartbeat_at__lt=now - timedelta(seconds=settings.LEARNING_RUN_STALE_AFTER),
            )
        )
        .order_by("pk")
        .values_list("pk", flat=True)[:500]
    )
