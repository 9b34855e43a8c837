"""Skills and their versions: every change of a skill's text is a new, immutable SkillVersion
(its full snapshot and the diff from the one before), whoever makes it — the curator of a
learning run, an operator's PATCH, a rollback, a deletion. The skill row holds the current
version's text, which is what the engine indexes.

A skill proves itself: the task sessions it was retrieved for (``SkillUse``) count their
outcomes when they close. A candidate becomes active once enough of them succeeded and the
lower bound of its success rate reaches ``SKILL_ACTIVATE_CONFIDENCE``; a skill whose uses bound
its rate below ``SKILL_REVIEW_CONFIDENCE`` is flagged for review, and an active one is demoted
to candidate. The confidence reported is the bound over every outcome it rests on, the
sessions it was learned from included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from accounts.tenancy import Tenant
from mirix_site.common.errors import ConflictError, InvalidInputError, ReadOnlyError
from mirix_site.common.publish import task_labels, task_publish
from mirix_site.providers.embeddings import EmbeddingProvider
from mirix_site.search.index import documents_index, documents_reindex
from skills.confidence import evidence, lower_bound
from skills.content import SkillContent, content_diff
from skills.lifecycle import SERVED_STATUSES, uses_verdict
from skills.models import LearningRun, Outcome, Skill, SkillProposal, SkillUse, SkillVersion
from skills.search import SKILL_KIND

# The task that embeds skills an API request changed (``skills.tasks``), queued by its name.
SKILLS_EMBED_TASK = "skills.tasks.skills_embed_task"


class SkillInputError(InvalidInputError):
    """A skill's fields break the Agent Skills rules or our limits: the fields to fix."""


class SkillConflictError(ConflictError):
    """The change cannot be made as asked (a name the user's other skill has, a version that
    does not exist): the message says why."""

    code = "skill_conflict"


class SkillReadOnlyError(ReadOnlyError):
    """Another client's skill: readable through a read scope, not changeable."""


def skill_confidence(skill: Skill) -> float:
    """The 5 % lower bound of the skill's success rate over every outcome it rests on."""
    successes, failures = evidence(
        successes=skill.successes + skill.learned_successes,
        failures=skill.failures + skill.learned_failures,
        partials=skill.partials + skill.learned_partials,
    )
    return round(lower_bound(successes=successes, failures=failures), 4)


@dataclass
class Written:
    skill: Skill
    version: SkillVersion
    created: bool  # False: the operation had written this version already


@dataclass(frozen=True)
class Provenance:
    """Who writes a version and from what."""

    author: str
    operation: str
    run: LearningRun | None = None
    experience_ids: Sequence[int] = ()
    operation_key: str | None = None
    note: str = ""
    # The outcomes of the sessions behind it, added to the skill's learned evidence.
    learned: dict[str, int] = field(default_factory=dict)


def _index(skill: Skill, *, new: bool, embedders: Sequence[EmbeddingProvider] | None) -> None:
    """BM25 now; vectors now when the caller holds the embedders (a worker), else by a task."""
    index = documents_index if new else documents_reindex
    index(documents=[(SKILL_KIND, skill)], embedders=embedders or [])
    if embedders is None:
        skill_id = skill.pk
        labels = task_labels(organization_id=skill.organization_id, user_id=skill.end_user.user_id)
        transaction.on_commit(lambda: task_publish(SKILLS_EMBED_TASK, [skill_id], labels=labels))


def _learned_add(skill: Skill, learned: dict[str, int]) -> None:
    skill.learned_successes += learned.get(Outcome.SUCCESS, 0)
    skill.learned_failures += learned.get(Outcome.FAILURE, 0)
    skill.learned_partials += learned.get(Outcome.PARTIAL, 0)


@transaction.atomic
def skill_version_write(
    *,
    owner: dict[str, Any],
    skill: Skill | None,
    content: SkillContent,
    provenance: Provenance,
    embedders: Sequence[EmbeddingProvider] | None = None,
    status: str | None = None,
    needs_review: bool = False,
    diff_from: SkillContent | Literal["row"] | None = "row",
) -> Written:
    """Write ``content`` as the next version of ``skill`` (None: a new skill of ``owner``,
    the ``organization_id``/``client_id``/``end_user_id`` it belongs to). An operation whose
    key wrote a version already writes nothing and returns that version. Raises
    SkillInputError for content that breaks the rules and SkillConflictError for a name the
    user's other skill holds. The content is stored redacted (``SkillContent.redacted``).
    The version's diff is from the skill's text as it is (``diff_from`` "row"), or from
    ``diff_from``, None for nothing: a backfill records text that changed without a version
    as the change from the newest version, or from nothing when there is none."""
    if provenance.operation_key:
        done = (
            SkillVersion.objects.select_related("skill")
            .filter(operation_key=provenance.operation_key)
            .first()
        )
        if done is not None:
            return Written(skill=done.skill, version=done, created=False)
    content = content.redacted()
    errors = content.errors()
    if errors:
        raise SkillInputError(errors)
    new = skill is None
    if new:
        skill = Skill(**owner)
        previous = None
    else:
        skill = Skill.objects.select_for_update().get(pk=skill.pk)
        previous = SkillContent.of(skill) if diff_from == "row" else diff_from
    skill.name, skill.description = content.name, content.description
    skill.triggers, skill.instructions = list(content.triggers), content.instructions
    skill.pitfalls = list(content.pitfalls)
    if status is not None:
        skill.status = status
    if needs_review:
        skill.needs_review = True
        skill.review_reason = provenance.note or "Flagged by the version that changed it."
    _learned_add(skill, provenance.learned)
    number = skill.version + 1
    skill.version = number
    try:
        with transaction.atomic():
            skill.save()
    except IntegrityError:
        raise SkillConflictError(f"This user already has a skill named {content.name!r}.") from None
    version = SkillVersion.objects.create(
        organization_id=skill.organization_id,
        client_id=skill.client_id,
        end_user_id=skill.end_user_id,
        skill=skill,
        number=number,
        snapshot=content.snapshot(),
        diff=content_diff(previous, content, numbers=(number - 1, number)),
        author=provenance.author,
        operation=provenance.operation,
        run=provenance.run,
        experience_ids=list(provenance.experience_ids),
        operation_key=provenance.operation_key,
        needs_review=needs_review,
        note=provenance.note,
    )
    _index(skill, new=new, embedders=embedders)
    return Written(skill=skill, version=version, created=True)


def _writable(tenant: Tenant, skill: Skill) -> None:
    if not tenant.owns(skill):
        raise SkillReadOnlyError(skill.pk)


@transaction.atomic
def skill_patch(
    *, tenant: Tenant, skill: Skill, changes: dict[str, Any], note: str = ""
) -> Written | Skill:
    """A client's change of its own skill (``skill_change``)."""
    _writable(tenant, skill)
    return skill_change(skill=skill, changes=changes, note=note)


@transaction.atomic
def skill_change(*, skill: Skill, changes: dict[str, Any], note: str = "") -> Written | Skill:
    """An operator's change (the API's PATCH, or the admin): text fields make a new version
    (author ``operator``); a status or ``needs_review`` alone changes the skill without one
    (they are not its text)."""
    skill = Skill.objects.select_for_update().get(pk=skill.pk)
    if skill.status == Skill.Status.DELETED:
        raise SkillConflictError("A deleted skill is not changed.")
    if skill.status == Skill.Status.DRAFT and changes.get("status", skill.status) != skill.status:
        raise SkillConflictError(
            "A draft waits for an operator's approval (SKILL_REQUIRE_APPROVAL): it is served "
            "once approved in the admin, not by setting its status."
        )
    if "status" in changes:
        skill.status = changes["status"]
    if "needs_review" in changes:
        skill.needs_review = changes["needs_review"]
        if not skill.needs_review:
            skill.review_reason = ""
    current = SkillContent.of(skill)
    text_fields = {"name", "description", "triggers", "instructions", "pitfalls"} & set(changes)
    content = SkillContent.from_snapshot(
        {**current.snapshot(), **{name: changes[name] for name in text_fields}}
    )
    if content == current:
        skill.save(update_fields=["status", "needs_review", "review_reason", "updated_at"])
        return skill
    skill.save(update_fields=["status", "needs_review", "review_reason", "updated_at"])
    return skill_version_write(
        owner=skill.owner_ids,
        skill=skill,
        content=content,
        provenance=Provenance(author=SkillVersion.Author.OPERATOR, operation="edit", note=note),
    )


@transaction.atomic
def skill_rollback(*, tenant: Tenant, skill: Skill, number: int) -> Written:
    """A client rolls its own skill back (``skill_version_restore``)."""
    _writable(tenant, skill)
    return skill_version_restore(skill=skill, number=number)


@transaction.atomic
def skill_version_restore(*, skill: Skill, number: int) -> Written:
    """A new version equal to version ``number`` (author ``rollback``)."""
    target = SkillVersion.objects.filter(skill=skill, number=number).first()
    if target is None:
        raise SkillConflictError(f"Skill {skill.pk} has no version {number}.")
    if skill.status == Skill.Status.DELETED:
        raise SkillConflictError("A deleted skill is not rolled back.")
    return skill_version_write(
        owner=skill.owner_ids,
        skill=skill,
        content=SkillContent.from_snapshot(target.snapshot),
        provenance=Provenance(
            author=SkillVersion.Author.ROLLBACK,
            operation="rollback",
            note=f"Rolled back to version {number}.",
        ),
    )


def skill_tools_add(*, skill: Skill, tools: Sequence[str], descriptions: dict[str, str]) -> None:
    """Add the tools a change's sessions used, and what they declared each does, to those the
    skill names (its text is the version's; its tools are not)."""
    if tools or descriptions:
        Skill.objects.filter(pk=skill.pk).update(
            tools=list(dict.fromkeys([*skill.tools, *tools])),
            tool_descriptions={**skill.tool_descriptions, **descriptions},
        )


# --- Approval mode (SKILL_REQUIRE_APPROVAL): drafts and proposals wait for an operator ---


@transaction.atomic
def skill_draft_approve(*, skill: Skill) -> Skill:
    """Serve a draft: it becomes a candidate, its text as learned (no new version)."""
    skill = Skill.objects.select_for_update().get(pk=skill.pk)
    if skill.status != Skill.Status.DRAFT:
        raise SkillConflictError(f"Skill {skill.name!r} is {skill.status}, not a draft.")
    skill.status = Skill.Status.CANDIDATE
    skill.save(update_fields=["status", "updated_at"])
    return skill


@transaction.atomic
def skill_proposal_write(
    *,
    skill: Skill,
    content: SkillContent,
    provenance: Provenance,
    tools: Sequence[str] = (),
    tool_descriptions: dict[str, str] | None = None,
    merged_skill_ids: Sequence[int] = (),
    needs_review: bool = False,
) -> SkillProposal:
    """A curator's change of ``skill`` kept for an operator to approve or reject, once per
    operation key (a run claimed again proposes nothing twice). Checked and redacted as a
    version is."""
    done = SkillProposal.objects.filter(operation_key=provenance.operation_key).first()
    if done is not None:
        return done
    content = content.redacted()
    errors = content.errors()
    if errors:
        raise SkillInputError(errors)
    return SkillProposal.objects.create(
        **skill.owner_ids,
        skill=skill,
        snapshot=content.snapshot(),
        base_version=skill.version,
        operation=provenance.operation,
        run=provenance.run,
        experience_ids=list(provenance.experience_ids),
        learned=dict(provenance.learned),
        tools=list(tools),
        tool_descriptions=dict(tool_descriptions or {}),
        merged_skill_ids=list(merged_skill_ids),
        needs_review=needs_review,
        note=provenance.note,
        operation_key=provenance.operation_key,
    )


def _proposal_pending(proposal: SkillProposal) -> SkillProposal:
    proposal = SkillProposal.objects.select_for_update().get(pk=proposal.pk)
    if proposal.state != SkillProposal.State.PENDING:
        raise SkillConflictError(f"This proposal was {proposal.state} already.")
    return proposal


@transaction.atomic
def skill_proposal_approve(*, proposal: SkillProposal) -> Written:
    """Write the proposal as the skill's next version (author ``curator``: its content, its
    run and experiences, their evidence), add the tools it names, deprecate the skills it
    merged. The version's diff is against the skill as it is now, as the admin showed it."""
    proposal = _proposal_pending(proposal)
    skill = proposal.skill
    if skill.status == Skill.Status.DELETED:
        raise SkillConflictError("A deleted skill is not changed.")
    provenance = Provenance(
        author=SkillVersion.Author.CURATOR,
        operation=proposal.operation,
        run=proposal.run,
        experience_ids=proposal.experience_ids,
        note=f"{proposal.note} (approved by an operator)".strip(),
        learned=proposal.learned,
    )
    written = skill_version_write(
        owner=skill.owner_ids,
        skill=skill,
        content=SkillContent.from_snapshot(proposal.snapshot),
        provenance=provenance,
        needs_review=proposal.needs_review,
    )
    skill_tools_add(
        skill=written.skill, tools=proposal.tools, descriptions=proposal.tool_descriptions
    )
    merged = Skill.objects.filter(pk__in=proposal.merged_skill_ids, status__in=SERVED_STATUSES)
    for source in merged:
        skill_version_write(
            owner=source.owner_ids,
            skill=source,
            content=SkillContent.of(source),
            provenance=replace(provenance, learned={}, note=f"Merged into {skill.name}."),
            status=Skill.Status.DEPRECATED,
        )
    proposal.state, proposal.version = SkillProposal.State.APPROVED, written.version
    proposal.decided_at = timezone.now()
    proposal.save(update_fields=["state", "version", "decided_at"])
    return written


@transaction.atomic
def skill_proposal_reject(*, proposal: SkillProposal) -> SkillProposal:
    """Refuse the proposal: nothing is written to the skill."""
    proposal = _proposal_pending(proposal)
    proposal.state, proposal.decided_at = SkillProposal.State.REJECTED, timezone.now()
    proposal.save(update_fields=["state", "decided_at"])
    return proposal


@transaction.atomic
def skill_delete(*, tenant: Tenant, skill: Skill) -> Skill:
    """Delete the skill softly: it is no longer served, and a version records when and by
    whom (its text unchanged). Deleting a deleted skill changes nothing."""
    _writable(tenant, skill)
    skill = Skill.objects.select_for_update().get(pk=skill.pk)
    if skill.status == Skill.Status.DELETED:
        return skill
    written = skill_version_write(
        owner=skill.owner_ids,
        skill=skill,
        content=SkillContent.of(skill),
        provenance=Provenance(
            author=SkillVersion.Author.OPERATOR, operation="delete", note="Deleted by the user."
        ),
        status=Skill.Status.DELETED,
    )
    return written.skill


def skill_uses_record(*, skills: Sequence[Skill], session_id: int) -> None:
    """The skills were retrieved for this task session: its outcome will count for them."""
    SkillUse.objects.bulk_create(
        [SkillUse(**skill.owner_ids, skill=skill, session_id=session_id) for skill in skills],
        ignore_conflicts=True,
    )


@transaction.atomic
def skill_uses_count(*, session_id: int, outcome: str | None) -> list[Skill]:
    """The session closed with ``outcome`` (None: it did not say): each skill it used counts
    it once, and is promoted or flagged as its evidence now says. Returns the skills counted."""
    uses = list(
        SkillUse.objects.select_for_update()
        .filter(session_id=session_id, counted_at__isnull=True)
        .order_by("skill_id")
    )
    if outcome not in Outcome.values or not uses:
        return []
    counter = {
        Outcome.SUCCESS: "successes",
        Outcome.FAILURE: "failures",
        Outcome.PARTIAL: "partials",
    }[Outcome(outcome)]
    now = timezone.now()
    SkillUse.objects.filter(pk__in=[use.pk for use in uses]).update(outcome=outcome, counted_at=now)
    counted = []
    for skill in Skill.objects.select_for_update().filter(pk__in=[use.skill_id for use in uses]):
        Skill.objects.filter(pk=skill.pk).update(**{counter: F(counter) + 1})
        skill.refresh_from_db()
        verdict = uses_verdict(skill)
        skill.status = verdict.status
        skill.needs_review, skill.review_reason = verdict.needs_review, verdict.review_reason
        skill.save(update_fields=["status", "needs_review", "review_reason", "updated_at"])
        counted.append(skill)
    return counted


def skills_embed(*, skill_ids: Sequence[int], embedders: Sequence[EmbeddingProvider]) -> int:
    """Embed these skills' current text with each model (a redelivery embeds them again: a
    skill's text may have changed since; it is a few rows)."""
    from mirix_site.search.index import embeddings_write_committed

    rows = list(Skill.objects.filter(pk__in=skill_ids))
    return len(
        embeddings_write_committed(
            documents=[(SKILL_KIND, row) for row in rows], embedders=embedders
        )
    )


def skill_uses_session_count(*, session_id: int) -> list[Skill]:
    """Count the closed task session's outcome for the skills it used: the outcome its closer
    stated, else the one its turns state (the user's last verdict, else its last tool call),
    none when they say nothing."""
    from sessions.models import Message, Session
    from skills.learning.distill import session_distill

    if not SkillUse.objects.filter(session_id=session_id, counted_at__isnull=True).exists():
        return []
    stated = Session.objects.filter(pk=session_id).values_list("outcome", flat=True).first()
    if stated is not None:
        return skill_uses_count(session_id=session_id, outcome=stated)
    turns = list(Message.objects.filter(session_id=session_id).order_by("position"))
    return skill_uses_count(session_id=session_id, outcome=session_distill(turns).outcome)
