"""Auto-dream of the memory types: near-duplicates merged (``memory.consolidation`` says which
are), a core block's repeated lines folded, each change authored ``auto_dream`` in the rows'
history; the runs that do it (``DreamRun``), asked for through the API or queued by the beat
job per user after ``AUTO_DREAM_AFTER_NEW_MEMORIES`` new memories; and an operator's undoing of
a merge (``memory_restore``).

A merge keeps the newest memory of the group current, citing the turns of all (its
``source_message_ids`` the union), and marks the others ``superseded_by`` it: kept, read with
``include_superseded``, never returned by a plain read or a search. Only memories of one user,
written by the caller's client, in the same scope (their filter tags but a turn's own ids:
``memory.tags``), are compared, and the one kept carries the tags of every turn it cites (a
merge never changes what a tag filter finds). An operator's restore of a merged memory makes
it current again and takes its turns, their tags and its time back from the one kept, as it
was before (what it held then is in its history).

A semantic dream also supersedes a fact a later turn contradicts (``memory.contradictions``):
the older is kept, ``superseded_by`` the newer, its ``valid_until`` the newer's time, so a
search ``as_of`` a moment before still finds it; and the ``human`` block's line stating it
becomes the current fact."""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, models, transaction
from django.db.models import Count, OuterRef, Q, Subquery
from django.utils import timezone

from accounts.models import EndUser
from accounts.tenancy import Tenant
from memory.consolidation import Candidate, Cluster, duplicates_group, lines_fold
from memory.contradictions import Stated, contradictions_find
from memory.dreams import DreamMode, DreamRequest, dream_mode_register, dream_run
from memory.models import CoreMemoryBlock, DreamRun, SemanticMemory
from memory.models.records import CURRENT
from memory.tags import same_scope, scope_tags, tags_distinct, tags_shared, turn_tags_of
from memory.types import MEMORY_TYPES, MemoryType
from mirix_site.common.errors import ConflictError
from mirix_site.common.history import AUTO_DREAM, history_context
from mirix_site.common.publish import task_labels, task_publish
from mirix_site.search.spaces import read_embedder

logger = logging.getLogger(__name__)

DREAM_RUN_TASK = "memory.tasks.dream_run_task"
# A running dream whose worker died is failed after this long (a dream takes seconds).
DREAM_RUN_STALE_AFTER = timedelta(hours=1)
# Two episodes told the same way are one event when told within this time of each other: the
# same greeting a week apart is two days' exchanges, not one event said twice.
EPISODE_WINDOW = timedelta(days=1)


class DreamRunConflictError(ConflictError):
    """A dream of this user is running already."""


def _counts(*, total: int, clusters: Sequence[Cluster[Any]], superseded: int = 0) -> dict:
    merged = len(clusters)
    gone = sum(len(cluster.others) for cluster in clusters) + superseded
    return {
        "total": total,
        "merged": merged,
        "superseded": gone,
        "unchanged": total - merged - gone,
    }


@dataclass(frozen=True)
class MergeRule:
    """What a memory type's merge compares: its text (never a secret), whether two rows may be
    one at all, and whether stored embeddings may say so (otherwise the text alone).
    ``since``: the field saying from when a memory holds; the kept one holds from the earliest
    of its group's (a fact said on Monday and again on Friday held on Wednesday)."""

    text: Callable[[Any], str]
    comparable: Callable[[Any, Any], bool]
    by_embedding: bool = True
    since: str | None = None

    @property
    def kept_fields(self) -> tuple[str, ...]:
        """What a merge changes on the memory it keeps (``merged_values``)."""
        since = () if self.since is None else (self.since,)
        return ("source_message_ids", "turn_tags", "filter_tags", *since)


def _same_tags(left: Any, right: Any) -> bool:
    """The same scope (``memory.tags``): memories of turns that differ only in their own ids
    may be one, and the one kept carries every turn's tags."""
    return same_scope(left.filter_tags, right.filter_tags)


def _same_episode(left: Any, right: Any) -> bool:
    return (
        _same_tags(left, right)
        and left.event_type == right.event_type
        and abs(left.occurred_at - right.occurred_at) <= EPISODE_WINDOW
    )


def _same_resource(left: Any, right: Any) -> bool:
    return _same_tags(left, right) and (not left.uri or not right.uri or left.uri == right.uri)


def _same_vault_entry(left: Any, right: Any) -> bool:
    return _same_tags(left, right) and left.entry_type == right.entry_type


MERGE_RULES: dict[str, MergeRule] = {
    "episodic": MergeRule(lambda row: f"{row.summary}\n{row.details}", _same_episode),
    "semantic": MergeRule(lambda row: f"{row.name}\n{row.summary}", _same_tags, since="valid_from"),
    "resource": MergeRule(lambda row: f"{row.title}\n{row.summary}", _same_resource),
    # The caption only, by its words: captions of two secrets ("work email", "home email")
    # embed alike, and the secret itself is never compared.
    "knowledge_vault": MergeRule(lambda row: row.caption, _same_vault_entry, by_embedding=False),
}


def _vectors(memory_type: MemoryType, rows: Sequence[models.Model]) -> dict[int, Any]:
    """The rows' stored vectors (their first chunk's, of the model searches read); rows not
    embedded yet have none."""
    kind = memory_type.kind
    if kind is None or not rows:
        return {}
    return dict(
        kind.embedding_model.objects.filter(
            memory_id__in=[row.pk for row in rows],
            model=read_embedder().model_name,
            chunk_index=0,
        ).values_list("memory_id", "embedding")
    )


def semantic_contradictions(rows: Sequence[models.Model]) -> list[tuple[models.Model, Any]]:
    """Facts a later one contradicts, as (older, newer) pairs: the older is superseded by the
    newer ("I live in Paris" ... "we moved to Berlin"). Structured facts only (a predicate
    stated), compared within the same scope as merges are (a supersession never leaves a
    scope's filter with neither fact; one naming the older fact's own turn finds it in a
    search ``as_of`` a moment it held), each at the time it was said (``valid_from``: its
    turn's); ``memory.contradictions`` is the rule."""
    by_tags: dict[str, list[Stated[models.Model]]] = {}
    for row in rows:
        if not row.predicate:
            continue
        stated = Stated(row, row.subject, row.predicate, row.value, row.valid_from)
        scope = json.dumps(scope_tags(row.filter_tags), sort_keys=True)
        by_tags.setdefault(scope, []).append(stated)
    return [pair for facts in by_tags.values() for pair in contradictions_find(facts)]


def merged_values(rule: MergeRule, keeper: Any, others: Sequence[Any]) -> dict[str, Any]:
    """What the memory kept by a merge holds (``rule.kept_fields``): ``keeper``'s values (a
    row, or its history's state before it kept any other) with those of the ``others`` merged
    into it. It cites all their turns, and a filter that found any of them finds it; with no
    others, its own values as they are."""
    values = {name: getattr(keeper, name) for name in rule.kept_fields}
    if not others:
        return values
    group = [keeper, *others]
    values["source_message_ids"] = sorted(
        {turn for row in group for turn in row.source_message_ids}
    )
    turn_tags = tags_distinct(
        tags for row in group for tags in turn_tags_of(row.turn_tags, row.filter_tags)
    )
    if turn_tags != keeper.turn_tags:
        values["turn_tags"], values["filter_tags"] = turn_tags, tags_shared(turn_tags)
    if rule.since is not None:
        values[rule.since] = min(getattr(row, rule.since) for row in group)
    return values


def _values_save(row: models.Model, values: dict[str, Any]) -> None:
    changed = [name for name, value in values.items() if getattr(row, name) != value]
    for name in changed:
        setattr(row, name, values[name])
    if changed:
        row.save(update_fields=[*changed, "updated_at"])


def _merges_apply(clusters: Sequence[Cluster[Any]], rule: MergeRule) -> None:
    now = timezone.now()
    for cluster in clusters:
        keeper = cluster.keeper
        _values_save(keeper, merged_values(rule, keeper, cluster.others))
        # One UPDATE per row group; the history trigger writes an event for each row.
        type(keeper).objects.filter(pk__in=[row.pk for row in cluster.others]).update(
            superseded_by=keeper, updated_at=now
        )


def _supersessions_apply(pairs: Sequence[tuple[models.Model, Any]]) -> None:
    for older, newer in pairs:
        older.superseded_by = newer
        older.valid_until = newer.valid_from
        older.save(update_fields=["superseded_by", "valid_until", "updated_at"])


def memories_merge(
    *, tenant: Tenant, end_user: EndUser, memory_type: MemoryType, dry_run: bool
) -> dict[str, int]:
    """Merge the near-duplicates among the user's current memories of one type that the
    caller's client wrote, the newest ``AUTO_DREAM_MAX_ROWS`` of them (``total`` counts those
    compared); ``dry_run``: count them, change nothing."""
    rule = MERGE_RULES[memory_type.name]
    rows = list(
        memory_type.model.objects.owned_by(tenant, end_user=end_user)
        .filter(CURRENT)
        .order_by("-created_at", "-id")[: settings.AUTO_DREAM_MAX_ROWS]
    )
    # Contradictions first, each fact at its own time: a fact said again after a change ("I
    # live in Paris" … "we moved to Berlin" … "back in Paris") is not merged with its first
    # saying, which the change ended.
    contradicted = semantic_contradictions(rows) if memory_type.name == "semantic" else []
    ended = {older.pk for older, _newer in contradicted}
    merging = [row for row in rows if row.pk not in ended]
    vectors = _vectors(memory_type, merging) if rule.by_embedding else {}
    clusters = duplicates_group(
        [Candidate(row, rule.text(row), vectors.get(row.pk)) for row in merging],
        comparable=rule.comparable,
    )
    if not dry_run:
        _supersessions_apply(contradicted)
        _merges_apply(clusters, rule)
    return _counts(total=len(rows), clusters=clusters, superseded=len(contradicted))


def human_block_facts_update(*, tenant: Tenant, end_user: EndUser) -> int:
    """The ``human`` block lists current facts only: each line stating a fact a later one
    superseded becomes the fact that is current now (following the chain of supersessions),
    or goes when the block states that one already. A line also stated by a current fact
    stays. Returns how many lines changed."""
    block = (
        CoreMemoryBlock.objects.owned_by(tenant, end_user=end_user)
        .filter(CURRENT, label="human")
        .first()
    )
    if block is None or not block.value:
        return 0
    facts = SemanticMemory.objects.owned_by(tenant, end_user=end_user).exclude(predicate="")
    summary_of = dict(facts.values_list("pk", "summary"))
    successor = dict(facts.filter(valid_until__isnull=False).values_list("pk", "superseded_by_id"))
    merged_into = dict(
        facts.filter(valid_until__isnull=True, superseded_by__isnull=False).values_list(
            "pk", "superseded_by_id"
        )
    )
    current = set(facts.filter(CURRENT).values_list("summary", flat=True))
    replacement: dict[str, str] = {}
    for pk in successor:
        line, seen, at = summary_of[pk], {pk}, pk
        while (following := successor.get(at) or merged_into.get(at)) and following not in seen:
            seen.add(following)
            at = following
        if line not in current and at in summary_of and summary_of[at] != line:
            replacement[line] = summary_of[at]
    lines = block.value.split("\n")
    kept = {line for line in lines if line not in replacement}
    updated: list[str] = []
    for line in lines:
        now_true = replacement.get(line)
        if now_true is None:
            updated.append(line)
        elif now_true not in kept and now_true not in updated:
            updated.append(now_true)
    if updated == lines:
        return 0
    block.value = "\n".join(updated)
    block.save(update_fields=["value", "updated_at"])
    return sum(1 for line in lines if line in replacement)


def semantic_dream(*, tenant: Tenant, end_user: EndUser, dry_run: bool) -> dict[str, int]:
    """A semantic dream: merges and supersessions (``memories_merge``), then the ``human``
    block brought to the facts now current (``human_block_facts_update``)."""
    report = memories_merge(
        tenant=tenant, end_user=end_user, memory_type=MEMORY_TYPES["semantic"], dry_run=dry_run
    )
    if not dry_run:
        human_block_facts_update(tenant=tenant, end_user=end_user)
    return report


def core_blocks_fold(*, tenant: Tenant, end_user: EndUser, dry_run: bool) -> dict[str, int]:
    """Fold the repeated lines of each core block the caller's client holds of the user into
    one; ``merged`` counts the blocks changed, ``lines_folded`` the lines gone."""
    blocks = list(
        CoreMemoryBlock.objects.owned_by(tenant, end_user=end_user).filter(CURRENT).order_by("pk")
    )
    changed, lines = 0, 0
    for block in blocks:
        value, folded = lines_fold(block.value)
        if not folded:
            continue
        changed, lines = changed + 1, lines + folded
        if not dry_run:
            block.value = value
            block.save(update_fields=["value", "updated_at"])
    return {
        "total": len(blocks),
        "merged": changed,
        "superseded": 0,
        "unchanged": len(blocks) - changed,
        "lines_folded": lines,
    }


def _mode_for(memory_type: MemoryType) -> DreamMode:
    def run(tenant: Tenant, end_user: EndUser, request: DreamRequest) -> dict[str, Any]:
        return memories_merge(
            tenant=tenant, end_user=end_user, memory_type=memory_type, dry_run=request.dry_run
        )

    return DreamMode(name=memory_type.name, run=run)


def memory_dream_modes_register() -> None:
    """The memory types' modes (procedural is skill learning's, registered by skills)."""
    dream_mode_register(
        DreamMode(
            name="core",
            run=lambda tenant, end_user, request: core_blocks_fold(
                tenant=tenant, end_user=end_user, dry_run=request.dry_run
            ),
        )
    )
    for name in MERGE_RULES:
        if name != "semantic":
            dream_mode_register(_mode_for(MEMORY_TYPES[name]))
    dream_mode_register(
        DreamMode(
            name="semantic",
            run=lambda tenant, end_user, request: semantic_dream(
                tenant=tenant, end_user=end_user, dry_run=request.dry_run
            ),
        )
    )


# --- Runs ----------------------------------------------------------------------------------------


def _run_work(run: DreamRun, tenant: Tenant, end_user: EndUser, request: DreamRequest) -> dict:
    with history_context(AUTO_DREAM, run_id=run.pk):
        return dream_run(tenant=tenant, end_user=end_user, request=request)


def dream_perform(*, tenant: Tenant, end_user: EndUser, request: DreamRequest) -> dict[str, Any]:
    """Run the request for the user now. A dry run only reports; otherwise the run is a
    ``DreamRun`` row (a dream of the user already running: ``DreamRunConflictError``), and every
    change it makes is authored ``auto_dream`` with its id."""
    if request.dry_run:
        return dream_run(tenant=tenant, end_user=end_user, request=request)
    now = timezone.now()
    try:
        with transaction.atomic():
            run = DreamRun.objects.create(
                **tenant.owner_ids(end_user),
                trigger=DreamRun.Trigger.REQUEST,
                mode=request.mode,
                state=DreamRun.State.RUNNING,
                started_at=now,
            )
    except IntegrityError:
        raise DreamRunConflictError("A dream of this user is running already.") from None
    try:
        with transaction.atomic():
            report = _run_work(run, tenant, end_user, request)
    except Exception as error:
        _run_finish(run, state=DreamRun.State.FAILED, error=repr(error))
        raise
    _run_finish(run, state=DreamRun.State.SUCCEEDED, report=report)
    return {**report, "dream_run_id": run.pk}


def _run_finish(run: DreamRun, *, state: str, report: dict | None = None, error: str = "") -> None:
    run.state, run.error, run.finished_at = state, error, timezone.now()
    run.report = report or {}
    run.save(update_fields=["state", "error", "finished_at", "report"])


def dream_run_claim_and_perform(*, organization_id: str, run_id: int) -> DreamRun | None:
    """The worker's side of a queued run: claim it (``queued → running``; None when it is gone,
    taken, or another dream of the user runs: the beat publishes it again), run every mode."""
    try:
        with transaction.atomic():
            claimed = DreamRun.objects.filter(
                pk=run_id, organization_id=organization_id, state=DreamRun.State.QUEUED
            ).update(state=DreamRun.State.RUNNING, started_at=timezone.now())
    except IntegrityError:
        return None
    if not claimed:
        return None
    run = DreamRun.objects.select_related("organization", "client", "end_user").get(pk=run_id)
    tenant = Tenant(organization=run.organization, client=run.client)
    request = DreamRequest(mode=run.mode, dry_run=False)
    try:
        with transaction.atomic():
            report = _run_work(run, tenant, run.end_user, request)
    except Exception as error:
        _run_finish(run, state=DreamRun.State.FAILED, error=repr(error))
        raise
    _run_finish(run, state=DreamRun.State.SUCCEEDED, report=report)
    return run


def _new_memories_by_owner() -> dict[tuple[str, str, int], int]:
    """Per (organization, client, user): memories created since the user's last dream run (or
    ever), over the types a dream merges."""
    totals: dict[tuple[str, str, int], int] = {}
    for name in MERGE_RULES:
        model = MEMORY_TYPES[name].model
        last_run = (
            DreamRun.objects.filter(
                client_id=OuterRef("client_id"), end_user_id=OuterRef("end_user_id")
            )
            .order_by("-created_at")
            .values("created_at")[:1]
        )
        rows = (
            model.objects.annotate(last_dream=Subquery(last_run))
            .filter(Q(last_dream__isnull=True) | Q(created_at__gt=models.F("last_dream")))
            .values_list("organization_id", "client_id", "end_user_id")
            .annotate(new=Count("id"))
            .order_by()
        )
        for organization_id, client_id, end_user_id, new in rows:
            key = (organization_id, client_id, end_user_id)
            totals[key] = totals.get(key, 0) + new
    return totals


def dreams_due_queue() -> int:
    """The beat job: queue one dream (mode ``all``) for each user with at least
    ``AUTO_DREAM_AFTER_NEW_MEMORIES`` memories newer than their last dream (0: off), publish
    every queued run (those the broker lost too: a run is claimed once however often it is
    sent), and fail running ones whose worker is gone. Returns how many runs it queued."""
    threshold = settings.AUTO_DREAM_AFTER_NEW_MEMORIES
    DreamRun.objects.filter(
        state=DreamRun.State.RUNNING, started_at__lt=timezone.now() - DREAM_RUN_STALE_AFTER
    ).update(state=DreamRun.State.FAILED, error="worker lost", finished_at=timezone.now())
    queued = 0
    if threshold > 0:
        due = [owner for owner, new in _new_memories_by_owner().items() if new >= threshold]
        # One statement per user decides, under "one queued dream run per user".
        for organization_id, client_id, end_user_id in due:
            waiting = DreamRun.objects.filter(
                client_id=client_id, end_user_id=end_user_id, state=DreamRun.State.QUEUED
            ).exists()
            DreamRun.objects.bulk_create(
                [
                    DreamRun(
                        organization_id=organization_id,
                        client_id=client_id,
                        end_user_id=end_user_id,
                        trigger=DreamRun.Trigger.THRESHOLD,
                        mode="all",
                    )
                ],
                ignore_conflicts=True,
            )
            queued += not waiting
    for run_id, organization_id, user_id in DreamRun.objects.filter(
        state=DreamRun.State.QUEUED
    ).values_list("pk", "organization_id", "end_user__user_id"):
        labels = task_labels(organization_id=organization_id, user_id=user_id)
        transaction.on_commit(
            lambda run_id=run_id, organization_id=organization_id, labels=labels: task_publish(
                DREAM_RUN_TASK, organization_id, run_id, labels=labels
            )
        )
    return queued


# --- Undoing -------------------------------------------------------------------------------------


def _merged(row: models.Model) -> bool:
    """Whether a superseded ``row`` was merged into the memory that supersedes it, rather than
    ended by a later fact (which sets when it stopped holding)."""
    return getattr(row, "valid_until", None) is None


def _before_merges(rule: MergeRule, keeper: models.Model) -> Any:
    """``keeper`` as it was before it kept any other memory: its history's state before the
    first change auto-dream made to what a merge changes (``rule.kept_fields``), or the row
    itself when none did. Only merges change those fields: a later restore, or a merge after
    it, does not move that state."""
    states = [*keeper.history.order_by("pgh_created_at", "pgh_id"), keeper]  # type: ignore[attr-defined]
    for state, after in itertools.pairwise(states):
        context = state.pgh_context if isinstance(state.pgh_context, dict) else {}
        if context.get("actor") == AUTO_DREAM and any(
            getattr(state, name) != getattr(after, name) for name in rule.kept_fields
        ):
            return state
    return keeper


def _kept_recompute(rule: MergeRule, keeper: models.Model) -> None:
    """After an undoing: ``keeper`` holds its own values with those of the memories still
    merged into it (``merged_values``), and so, in turn, does each memory it was merged into.
    A merge keeps the newest of its group, so the chain ends."""
    while keeper is not None:
        others = [
            row
            for row in type(keeper)
            .objects.filter(superseded_by=keeper)
            .order_by("-created_at", "-id")
            if _merged(row)
        ]
        _values_save(keeper, merged_values(rule, _before_merges(rule, keeper), others))
        keeper = keeper.superseded_by if _merged(keeper) else None


@transaction.atomic
def memory_restore(*, memory_type: MemoryType, rows: Sequence[models.Model]) -> int:
    """An operator's undoing of a merge (or a supersession): the rows are current again, as
    they were, and a memory they were merged into cites their turns no more (its own, and
    those of the others still merged into it). Returns how many were superseded."""
    restored, keepers = 0, set()
    for row in rows:
        if row.superseded_by_id is None:
            continue
        changed = ["superseded_by", "updated_at"]
        if _merged(row):
            keepers.add(row.superseded_by_id)
        else:
            row.valid_until = None  # valid again, as it was before a later fact replaced it
            changed.append("valid_until")
        row.superseded_by = None
        row.save(update_fields=changed)
        restored += 1
    rule = MERGE_RULES.get(memory_type.name)
    if rule is not None:
        for keeper in memory_type.model.objects.filter(pk__in=keepers).order_by("created_at", "id"):
            _kept_recompute(rule, keeper)
    return restored
