"""A run's curate step: the user's waiting lessons read in batches, each batch's operations
(the curator's, ``skills.learning.curate``, or the model's) applied to the user's skills, one
operation a transaction, and what no operation placed pooled for the next run."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from mirix_site.providers.embeddings import EmbeddingProvider
from mirix_site.providers.llm import LLMProvider, estimate_tokens
from skills.content import REWRITE_REVIEW_SHARE, SkillContent, rewrite_share
from skills.learning.clusters import task_clusters
from skills.learning.curate import (
    LessonView,
    Operation,
    SkillView,
    batches_fill,
    content_over,
    curate,
    curator_prompt,
    operations_parse,
)
from skills.learning.prompts import CURATOR_SYSTEM, OPERATIONS_SCHEMA
from skills.learning.runs import (
    Budget,
    BudgetExhaustedError,
    Claim,
    llm_call,
    run_beat,
    run_fenced,
    run_warn,
    slice_check,
    window_budget,
)
from skills.lifecycle import SERVED_STATUSES
from skills.models import (
    LESSONS_WAITING,
    Experience,
    LearningRun,
    LessonStatus,
    Skill,
    SkillVersion,
)
from skills.services.skills import (
    Provenance,
    SkillConflictError,
    SkillInputError,
    skill_proposal_write,
    skill_tools_add,
    skill_version_write,
    skills_embed,
)


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


def _operation_key(run: LearningRun, operation: Operation, part: str = "") -> str:
    name = operation.content.name if operation.content is not None else ""
    what = f"{run.pk}:{operation.kind}:{operation.target or ''}:{name}:{part}:" + ",".join(
        str(i) for i in sorted(operation.lesson_ids)
    )
    return hashlib.sha256(what.encode()).hexdigest()


def _consume(run: LearningRun, lesson_ids: Sequence[int]) -> int:
    return Experience.objects.filter(pk__in=lesson_ids, status__in=LESSONS_WAITING).update(
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


def _edit_write(
    *,
    run: LearningRun,
    operation: Operation,
    target: Skill,
    content: SkillContent,
    provenance: Provenance,
    described: dict[str, str],
    by_name: dict[str, Skill],
    review: bool,
    embedders: Sequence[EmbeddingProvider],
) -> None:
    """An edit or merge written now: the target's next version, the tools its sessions
    declared, and the merged skills deprecated."""
    written = skill_version_write(
        owner=run.owner_ids,
        skill=target,
        content=content,
        provenance=provenance,
        embedders=embedders,
        needs_review=review,
    )
    if written.created:
        skill_tools_add(skill=target, tools=operation.tools, descriptions=described)
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


def _apply(claim: Claim, operation: Operation) -> list[str]:
    """Apply one operation in one transaction, consuming the lessons it names that still wait;
    returns warnings. An operation applied before (a run claimed again) finds its version by
    its key and writes nothing. Skills are indexed for BM25 here; their vectors are written for
    the whole batch at once (``_batch_embed``)."""
    embedders: Sequence[EmbeddingProvider] = []
    warnings: list[str] = []
    with transaction.atomic():
        run = run_fenced(claim)
        waiting = list(
            Experience.objects.select_for_update()
            .filter(pk__in=operation.lesson_ids, status__in=LESSONS_WAITING)
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
                        # Approval mode: kept, not served, until an operator approves it.
                        status=Skill.Status.DRAFT if settings.SKILL_REQUIRE_APPROVAL else None,
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
                    if settings.SKILL_REQUIRE_APPROVAL and target.status != Skill.Status.DRAFT:
                        # Approval mode: a skill a draft no longer is changes when an operator
                        # approves; the skills it merges are deprecated then.
                        skill_proposal_write(
                            skill=target,
                            content=content,
                            provenance=provenance,
                            tools=operation.tools,
                            tool_descriptions=described,
                            merged_skill_ids=[
                                by_name[source].pk
                                for source in operation.sources
                                if source in by_name
                            ],
                            needs_review=review,
                        )
                    else:
                        _edit_write(
                            run=run,
                            operation=operation,
                            target=target,
                            content=content,
                            provenance=provenance,
                            described=described,
                            by_name=by_name,
                            review=review,
                            embedders=embedders,
                        )
                        edited = "skills_edited" if operation.kind == "edit" else "skills_merged"
                        counters[edited] = 1
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
    run_beat(claim)


def _pool(claim: Claim, lessons: Sequence[tuple[int, str]]) -> None:
    with transaction.atomic():
        run = run_fenced(claim)
        pooled = 0
        for lesson_id, reason in lessons:
            pooled += Experience.objects.filter(pk=lesson_id, status__in=LESSONS_WAITING).update(
                status=LessonStatus.POOLED, pool_reason=reason
            )
        LearningRun.objects.filter(pk=run.pk).update(
            experiences_pooled=F("experiences_pooled") + pooled
        )


def _waiting_lessons(run: LearningRun) -> list[Experience]:
    """The user's lessons no curator has placed: those pooled by earlier runs, then new ones."""
    return list(
        Experience.objects.filter(
            client_id=run.client_id, end_user_id=run.end_user_id, status__in=LESSONS_WAITING
        ).order_by("pk")
    )


def lessons_curate(
    *,
    claim: Claim,
    llm: LLMProvider | None,
    embedder: EmbeddingProvider | None,
    embedders: Sequence[EmbeddingProvider],
    budget: Budget,
    threshold: float | None,
    deadline: float | None,
) -> None:
    views = [_lesson_view(row) for row in _waiting_lessons(claim.run)]
    skills = [_skill_view(skill) for skill in _skills(claim.run)]
    fixed = estimate_tokens(CURATOR_SYSTEM + curator_prompt(skills, []))
    filled = batches_fill(views, budget=window_budget(), fixed_tokens=fixed, count=estimate_tokens)
    _pool(claim, [(lesson.id, reason) for lesson, reason in filled.oversized])
    for position, batch in enumerate(filled.batches):
        if position:
            slice_check(deadline)
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
            data = llm_call(
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
        run_beat(claim, steps=1)
        began = None if position == 0 and claim.attempt > 1 else timezone.now()
        for number, operation in enumerate(operations):
            if number:
                # What is left of the batch waits: its lessons are still unplaced.
                slice_check(deadline)
            warnings += _apply(claim, operation)
        _batch_embed(claim, embedders, since=began)
        named = {lesson_id for operation in operations for lesson_id in operation.lesson_ids}
        unplaced = [lesson.id for lesson in batch if lesson.id not in named]
        _pool(
            claim, [(lesson_id, "The curator placed it in no operation.") for lesson_id in unplaced]
        )
        run_warn(claim, warnings)
