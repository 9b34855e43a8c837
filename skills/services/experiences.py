"""Recording experiences, replacing and deleting them, and embedding them in the worker.

A recorded experience is searchable by BM25 as soon as its request commits (its postings are
written with it); the worker embeds it and groups its action's phrasing right after
(``skills.embedding_queue``), so a batch of a thousand costs the request no model run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from accounts.models import EndUser
from accounts.services import end_user_create_or_get
from accounts.tenancy import Tenant
from mirix_site.common.errors import ConflictError, InvalidInputError, NotFoundError, ReadOnlyError
from mirix_site.common.rows import rows_insert
from mirix_site.search.index import (
    documents_index,
    documents_reindex,
    documents_unindex,
)
from sessions.sensitive import Found, sensitive_redacted, sensitive_redacted_json
from skills.embedding_queue import experiences_embed_soon
from skills.models import (
    OUTCOME_SCORES,
    Experience,
    ExperienceSettings,
    Origin,
    Outcome,
    Recommendation,
)
from skills.search import EXPERIENCE_KIND
from skills.services.grouping import action_key

# A clock a little ahead of ours is not "the future".
FUTURE_TOLERANCE = timedelta(minutes=5)


class ExperienceInputError(InvalidInputError):
    """What a caller sent cannot be stored as sent (a date in the future): the fields to fix,
    by name, as a 422 reports them."""


class ExperienceReferenceError(NotFoundError):
    """A field names an experience or a recommendation the caller cannot see (missing, of
    another tenant, of another user: all alike). ``where`` names the field."""

    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"No such {what} of this user: {where}.")
        self.where = where


class ExperienceConflictError(ConflictError):
    """A replacement that would make an experience replace itself, directly or in a cycle."""


class ExperienceReadOnlyError(ReadOnlyError):
    """The experience belongs to another client of the organization: readable, not writable."""


@dataclass(frozen=True)
class ExperienceInput:
    """One experience as a caller describes it (validated by the API's serializer)."""

    task: str
    action: str
    outcome: str
    score: float | None = None
    reason: str = ""
    context: dict[str, Any] = field(default_factory=dict)
    filter_tags: dict[str, Any] = field(default_factory=dict)
    supersedes: int | None = None
    recommendation_id: int | None = None
    occurred_at: datetime | None = None
    origin: str = Origin.API
    transcript_digest: str = ""  # origin conversation: the transcript it was distilled from


@dataclass
class Recorded:
    experiences: list[Experience]
    # (index in the request, what looks wrong): stored as sent, and said so.
    warnings: list[tuple[int, str]]


def score_warning(outcome: str, score: float) -> str | None:
    """A score that contradicts the outcome (a success at 0.1), or None."""
    if outcome == Outcome.SUCCESS and score < 0.5:
        return f"score {score:g} is low for a success; stored as sent"
    if outcome == Outcome.FAILURE and score > 0.5:
        return f"score {score:g} is high for a failure; stored as sent"
    return None


def _references_check(
    *, tenant: Tenant, end_user: EndUser, items: Sequence[ExperienceInput], prefix: str
) -> dict[int, Experience]:
    """The experiences the items supersede, each the caller's own and of the same user, as is
    every recommendation they cite. The first wrong reference refuses the lot: one the caller
    cannot see and one it reads through a read scope alike (a write counts only for the
    caller's own rows); otherwise every date in the future is named in one error."""
    errors: dict[str, list[str]] = {}
    wanted = {item.supersedes for item in items if item.supersedes is not None}
    cited = {item.recommendation_id for item in items if item.recommendation_id is not None}
    # Most records cite nothing: no query for them (half of a single record's time).
    targets = (
        {
            row.pk: row
            for row in Experience.objects.owned_by(tenant, end_user=end_user).filter(pk__in=wanted)
        }
        if wanted
        else {}
    )
    recommendations = (
        set(
            Recommendation.objects.owned_by(tenant, end_user=end_user)
            .filter(pk__in=cited)
            .values_list("pk", flat=True)
        )
        if cited
        else set()
    )
    for index, item in enumerate(items):
        where = f"{prefix}{index}." if prefix else ""
        if item.supersedes is not None and item.supersedes not in targets:
            raise ExperienceReferenceError(f"{where}supersedes", "experience")
        if item.recommendation_id is not None and item.recommendation_id not in recommendations:
            raise ExperienceReferenceError(f"{where}recommendation_id", "recommendation")
        if item.occurred_at is not None and item.occurred_at > timezone.now() + FUTURE_TOLERANCE:
            errors[f"{where}occurred_at"] = ["Must not be in the future."]
    if errors:
        raise ExperienceInputError(errors)
    return targets


# What an experience says in words, and its structured fields: every one redacted before it
# is stored (``experience_redacted``).
_TEXT_FIELDS = ("task", "action", "reason", "title", "content", "evidence", "pool_reason")
_JSON_FIELDS = ("context", "filter_tags")


def experience_redacted(row: Experience, *, known: Sequence[Found] = ()) -> Experience:
    """``row`` (unsaved, or about to be saved again) with every sensitive value in its text
    and structured fields replaced by its kind's placeholder (``sessions.sensitive``), and its
    action's key read from the redacted action. ``known``: values found in the turns it was
    derived from."""
    for name in _TEXT_FIELDS:
        setattr(row, name, sensitive_redacted(getattr(row, name), known=known))
    for name in _JSON_FIELDS:
        setattr(row, name, sensitive_redacted_json(getattr(row, name), known=known))
    row.action_key = action_key(row.action)
    return row


def _row(tenant: Tenant, end_user: EndUser, item: ExperienceInput, now: datetime) -> Experience:
    return experience_redacted(
        Experience(
            organization_id=tenant.organization.pk,
            client_id=tenant.client.pk,
            end_user=end_user,
            task=item.task,
            action=item.action,
            outcome=item.outcome,
            score=item.score if item.score is not None else OUTCOME_SCORES[Outcome(item.outcome)],
            reason=item.reason,
            context=item.context,
            filter_tags=item.filter_tags,
            recommendation_id=item.recommendation_id,
            occurred_at=item.occurred_at or now,
            origin=item.origin,
            transcript_digest=item.transcript_digest,
        )
    )


def _embed_later(experiences: Sequence[Experience]) -> None:
    ids = [experience.pk for experience in experiences]
    if ids:
        transaction.on_commit(lambda: experiences_embed_soon(ids))


@transaction.atomic
def experiences_record(
    *,
    tenant: Tenant,
    user_id: str,
    items: Sequence[ExperienceInput],
    prefix: str = "",
) -> Recorded:
    """Store these experiences of the user (created if new), all of them or none (a wrong
    reference anywhere refuses the lot), link what they supersede, and index them for BM25
    now, for the vector lane in the worker. ``prefix`` names the items in errors
    (``experiences.``)."""
    end_user, _ = end_user_create_or_get(tenant=tenant, user_id=user_id, name=None)
    targets = _references_check(tenant=tenant, end_user=end_user, items=items, prefix=prefix)
    now = timezone.now()
    rows = rows_insert(
        model=Experience, instances=[_row(tenant, end_user, item, now) for item in items]
    )
    warnings = []
    for index, (item, row) in enumerate(zip(items, rows, strict=True)):
        warning = score_warning(row.outcome, row.score)
        if warning is not None:
            warnings.append((index, warning))
        if item.supersedes is not None:
            target = targets[item.supersedes]
            target.superseded_by, target.superseded_at = row, now
            target.save(update_fields=["superseded_by", "superseded_at", "updated_at"])
    documents_index(documents=[(EXPERIENCE_KIND, row) for row in rows], embedders=[])
    _embed_later(rows)
    return Recorded(experiences=rows, warnings=warnings)


def transcript_digest(messages: Sequence[dict[str, Any]]) -> str:
    """The same transcript, sent again, has the same digest (key order and spacing aside)."""
    canonical = json.dumps(list(messages), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


@transaction.atomic
def experience_record_transcript(
    *,
    tenant: Tenant,
    user_id: str,
    item: ExperienceInput,
) -> tuple[Experience, bool]:
    """Store the experience distilled from a transcript (``item.transcript_digest``), or
    replace the one the same transcript gave before. Returns it and whether it replaced one."""
    end_user, _ = end_user_create_or_get(tenant=tenant, user_id=user_id, name=None)
    existing = (
        Experience.objects.owned_by(tenant, end_user=end_user)
        .select_for_update()
        .filter(transcript_digest=item.transcript_digest)
        .first()
    )
    if existing is None:
        [row] = experiences_record(tenant=tenant, user_id=user_id, items=[item]).experiences
        return row, False
    _references_check(tenant=tenant, end_user=end_user, items=[item], prefix="")
    fresh = _row(tenant, end_user, item, timezone.now())
    taken = ("task", "action", "action_key", "outcome", "score", "reason", "context")
    for name in (*taken, "filter_tags", "recommendation_id", "occurred_at"):
        setattr(existing, name, getattr(fresh, name))
    existing.save()
    documents_reindex(documents=[(EXPERIENCE_KIND, existing)], embedders=[])
    _embed_later([existing])
    return existing, True


@transaction.atomic
def experience_settings_set(*, tenant: Tenant, half_life_days: float | None) -> ExperienceSettings:
    """The client's defaults for recall and recommend (None: no decay unless a request asks)."""
    row, _ = ExperienceSettings.objects.update_or_create(
        client=tenant.client,
        defaults={"organization": tenant.organization, "half_life_days": half_life_days},
    )
    return row


def _writable(tenant: Tenant, experience: Experience) -> None:
    if not tenant.owns(experience):
        raise ExperienceReadOnlyError(experience.pk)


@transaction.atomic
def experience_supersede(*, tenant: Tenant, experience: Experience, by: Experience) -> Experience:
    """Mark ``experience`` replaced by ``by`` (both the caller's own, of one user): it leaves
    recall and recommend unless they ask for superseded rows, and stays readable by id."""
    _writable(tenant, experience)
    if experience.end_user_id != by.end_user_id or not tenant.owns(by):
        raise ExperienceReferenceError("by", "experience")
    if by.pk == experience.pk:
        raise ExperienceConflictError("An experience cannot supersede itself.")
    seen, step = {by.pk}, by
    while step.superseded_by_id is not None:
        if step.superseded_by_id == experience.pk:
            raise ExperienceConflictError(
                f"Experience {by.pk} is itself superseded, through a chain, by {experience.pk}: "
                "this would make a cycle."
            )
        if step.superseded_by_id in seen:
            break
        seen.add(step.superseded_by_id)
        step = Experience.objects.only("id", "superseded_by_id").get(pk=step.superseded_by_id)
    experience.superseded_by, experience.superseded_at = by, timezone.now()
    experience.save(update_fields=["superseded_by", "superseded_at", "updated_at"])
    return experience


@transaction.atomic
def experience_delete(*, tenant: Tenant, experience: Experience) -> None:
    """Delete an experience the caller's client wrote. What it superseded becomes current
    again: the replacement is gone."""
    _writable(tenant, experience)
    documents_unindex(kind=EXPERIENCE_KIND, document_ids=[experience.pk])
    Experience.objects.filter(superseded_by=experience).update(
        superseded_by=None, superseded_at=None
    )
    experience.delete()
