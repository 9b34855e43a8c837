"""Reading experiences and what became of recommendations, learning runs, and skills with
their versions, within what the tenant may read."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Q, QuerySet

from accounts.models import EndUser
from accounts.tenancy import Tenant
from mirix_site.common.errors import NotFoundError
from mirix_site.common.ids import row_id
from mirix_site.common.rowsmemo import rows_memo
from skills.confidence import confidence_band
from skills.lifecycle import SERVED
from skills.models import (
    OUTCOME_SCORES,
    Experience,
    ExperienceSettings,
    LearningRun,
    Origin,
    Outcome,
    Recommendation,
    Skill,
    SkillVersion,
)


class ExperienceNotFoundError(NotFoundError):
    """No such experience the tenant may read (another tenant's looks the same)."""


def experience_get(
    *, tenant: Tenant, experience_id: str, end_user: EndUser | None = None
) -> Experience:
    """One experience the tenant may read (of ``end_user``, when given), superseded or not."""
    pk = row_id(experience_id)
    if pk is None:
        raise ExperienceNotFoundError(experience_id)
    found = (
        Experience.objects.readable_by(tenant, end_user=end_user)
        .select_related("end_user")
        .filter(pk=pk)
        .first()
    )
    if found is None:
        raise ExperienceNotFoundError(experience_id)
    return found


def experiences_recent(
    *, tenant: Tenant, end_user: EndUser, outcome: str | None = None
) -> QuerySet[Experience]:
    """The user's experiences, newest first (superseded ones included: this is the log)."""
    rows = Experience.objects.readable_by(tenant, end_user=end_user).select_related("end_user")
    if outcome is not None:
        rows = rows.filter(outcome=outcome)
    return rows.order_by("-created_at", "-id")


def experience_settings_get(*, tenant: Tenant) -> ExperienceSettings:
    """The client's defaults for recall and recommend (unsaved defaults when never set)."""
    found = ExperienceSettings.objects.filter(client=tenant.client).first()
    return found or ExperienceSettings(organization=tenant.organization, client=tenant.client)


@rows_memo(ExperienceSettings)
def _client_half_life(client_id: str) -> float | None:
    # Every recall and recommend without a half-life of its own reads it; a client sets it
    # rarely. Memoized like the spaces and calibrations every search reads
    # (mirix_site.common.rowsmemo): one round trip fewer per recall (bench/RESULTS.md,
    # bench/experiences.py).
    found = ExperienceSettings.objects.filter(client_id=client_id).first()
    # A client that never set one has the model's default, as experience_settings_get answers.
    return (found or ExperienceSettings()).half_life_days


def half_life_for(*, tenant: Tenant, asked: float | None) -> float | None:
    """The half-life a recall or recommend uses: the request's (0: none), else the client's."""
    if asked is not None:
        return asked or None
    return _client_half_life(tenant.client.pk)


def experience_stats(*, tenant: Tenant, end_user: EndUser) -> dict[str, Any]:
    """What the user's experiences hold, and how followed recommendations did per confidence
    band: a 5 % lower bound that means what it says has a success rate at or above its mean
    confidence in every band with enough outcomes."""
    rows = Experience.objects.readable_by(tenant, end_user=end_user)
    totals = rows.aggregate(
        total=Count("id"),
        superseded=Count("id", filter=Q(superseded_by__isnull=False)),
        **{f"outcome_{o}": Count("id", filter=Q(outcome=o)) for o in Outcome.values},
        **{f"origin_{o}": Count("id", filter=Q(origin=o)) for o in Origin.values},
    )
    recommendations = Recommendation.objects.readable_by(tenant, end_user=end_user)
    followed = list(
        recommendations.filter(outcomes__isnull=False).values_list(
            "id", "confidence", "outcomes__outcome"
        )
    )
    bands: dict[tuple[float, float], dict[str, Any]] = {}
    for _, confidence, outcome in followed:
        band = bands.setdefault(
            confidence_band(confidence), {"outcomes": 0, "credit": 0.0, "confidence": 0.0}
        )
        band["outcomes"] += 1
        band["credit"] += OUTCOME_SCORES[Outcome(outcome)]  # a partial is half a success
        band["confidence"] += confidence
    return {
        "total": totals["total"],
        "current": totals["total"] - totals["superseded"],
        "superseded": totals["superseded"],
        # Recorded, not embedded yet: BM25 finds them, the vector lane not until the worker ran.
        "embedding_pending": rows.filter(embeddings__isnull=True).count(),
        "by_outcome": {o: totals[f"outcome_{o}"] for o in Outcome.values},
        "by_origin": {o: totals[f"origin_{o}"] for o in Origin.values},
        "recommendations": {
            "issued": recommendations.count(),
            "followed": len({recommendation for recommendation, _, _ in followed}),
            "outcomes": len(followed),
            "bands": [
                {
                    "band": f"{low:.1f}-{high:.1f}",
                    "outcomes": band["outcomes"],
                    "success_rate": round(band["credit"] / band["outcomes"], 4),
                    "mean_confidence": round(band["confidence"] / band["outcomes"], 4),
                }
                for (low, high), band in sorted(bands.items())
            ],
        },
    }


class LearningRunNotFoundError(NotFoundError):
    """No learning run with this id that the tenant may read."""


def learning_runs_list(*, tenant: Tenant, end_user: EndUser | None = None) -> QuerySet[LearningRun]:
    """The learning runs the tenant may read (of ``end_user``, when given), newest first."""
    rows = LearningRun.objects.readable_by(tenant, end_user=end_user)
    return (
        rows.select_related("end_user")
        .prefetch_related("session_links__session")
        .order_by("-created_at", "-id")
    )


def learning_run_get(*, tenant: Tenant, run_id: str) -> LearningRun:
    pk = row_id(run_id)
    if pk is None:
        raise LearningRunNotFoundError(run_id)
    found = learning_runs_list(tenant=tenant).filter(pk=pk).first()
    if found is None:
        raise LearningRunNotFoundError(run_id)
    return found


class SkillNotFoundError(NotFoundError):
    """No skill with this id that the tenant may read (deleted ones included: they are kept)."""


def skills_list(
    *, tenant: Tenant, end_user: EndUser | None = None, status: str | None = None
) -> QuerySet[Skill]:
    """The skills the tenant may read (of ``end_user``, with ``status``, when given), by name;
    deleted ones only when asked for by status."""
    rows = Skill.objects.readable_by(tenant, end_user=end_user).select_related("end_user")
    if status is not None:
        return rows.filter(status=status).order_by("name", "id")
    return rows.exclude(status=Skill.Status.DELETED).order_by("name", "id")


def skills_served(*, tenant: Tenant, end_user: EndUser) -> list[Skill]:
    """The user's skills that searches serve, by name: what an export holds (``GET
    /skills/export``, ``manage.py export_skills``)."""
    return list(skills_list(tenant=tenant, end_user=end_user).filter(SERVED))


def skill_get(*, tenant: Tenant, skill_id: str) -> Skill:
    pk = row_id(skill_id)
    if pk is None:
        raise SkillNotFoundError(skill_id)
    found = Skill.objects.readable_by(tenant).select_related("end_user").filter(pk=pk).first()
    if found is None:
        raise SkillNotFoundError(skill_id)
    return found


def skill_versions_list(*, skill: Skill) -> QuerySet[SkillVersion]:
    return SkillVersion.objects.filter(skill=skill).order_by("-number")


def skill_experience_ids(*, skill: Skill) -> list[int]:
    """The experiences behind any version of the skill, oldest first."""
    ids: dict[int, None] = {}
    for listed in (
        skill_versions_list(skill=skill).order_by("number").values_list("experience_ids", flat=True)
    ):
        ids.update(dict.fromkeys(listed))
    return list(ids)


def learning_runs_waiting() -> dict[str, int]:
    """Every tenant's learning runs queued and running, by state: an operator's figure (at
    most one of each per user, read through those constraints' partial indexes)."""
    states = [LearningRun.State.QUEUED, LearningRun.State.RUNNING]
    counts = dict(
        LearningRun.objects.filter(state__in=states)
        .values_list("state")
        .annotate(runs=Count("id"))
        .order_by()
    )
    return {str(state): counts.get(state, 0) for state in states}
