"""Reading experiences and what became of recommendations, learning runs, and skills with
their versions, within what the tenant may read."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from django.db import connection
from django.db.models import Count, Q, QuerySet
from django.db.models.functions import TruncDate

from accounts.models import EndUser
from accounts.tenancy import Scope, Tenant
from mirix_site.common.errors import NotFoundError
from mirix_site.common.ids import row_id
from mirix_site.common.rowsmemo import rows_memo
from mirix_site.console.panels import DailyFigures, utc_day_range
from skills.confidence import confidence_band
from skills.lifecycle import PROVEN_STATUSES, SERVED, SERVED_STATUSES
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


@dataclass
class ActionGroup:
    """A group of phrasings of one action (``ActionPhrase``): what recommend pools. ``id``: its
    oldest phrasing's; ``last_at``: its newest current experience's time (its phrasings' own
    when none is left)."""

    id: int
    client_id: str
    key: str
    last_at: datetime
    phrasings: list[dict[str, Any]] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(Outcome.values, 0))


# One query: the owner's current experiences counted per phrasing, the phrasings grouped, a
# page of groups in (last_at, id) descending order, and each group's phrasings.
_ACTION_GROUPS_SQL = """
WITH counts AS (
    SELECT e.client_id, e.action_key, max(e.created_at) AS last_at,
           count(*) FILTER (WHERE e.outcome = 'success') AS success,
           count(*) FILTER (WHERE e.outcome = 'failure') AS failure,
           count(*) FILTER (WHERE e.outcome = 'partial') AS partial
    FROM skills_experience e
    WHERE {experiences} AND e.superseded_by_id IS NULL
    GROUP BY e.client_id, e.action_key
), phrases AS (
    SELECT p.id, p.client_id, p.group_key, p.key, p.text, p.created_at, c.last_at,
           coalesce(c.success, 0) AS success, coalesce(c.failure, 0) AS failure,
           coalesce(c.partial, 0) AS partial
    FROM skills_actionphrase p
    LEFT JOIN counts c ON c.client_id = p.client_id AND c.action_key = p.key
    WHERE {phrases}
), groups AS (
    SELECT client_id, group_key, min(id) AS id,
           coalesce(max(last_at), max(created_at)) AS last_at
    FROM phrases GROUP BY client_id, group_key
), page AS (
    SELECT * FROM groups
    WHERE %(after_at)s::timestamptz IS NULL OR (last_at, id) < (%(after_at)s, %(after_id)s)
    ORDER BY last_at DESC, id DESC
    LIMIT %(count)s
)
SELECT g.id, g.last_at, g.client_id, g.group_key, p.key, p.text, p.success, p.failure,
       p.partial
FROM page g JOIN phrases p ON p.client_id = g.client_id AND p.group_key = g.group_key
ORDER BY g.last_at DESC, g.id DESC, p.success + p.failure + p.partial DESC, p.id
"""


def action_groups_list(
    *, tenant: Tenant, end_user: EndUser, after: list[Any] | None, count: int
) -> list[ActionGroup]:
    """The user's action groups the tenant may read, newest activity first: ``count`` of them
    after the (last_at, id) ``after`` (None: from the first), each with its phrasings (text,
    key, how many current experiences), most used first, and its current experiences'
    outcomes. Phrasings the worker has not grouped yet are not listed."""
    scope = Scope.readable_by(tenant, end_user=end_user)
    experiences, params = scope.where("e.")
    phrases, _ = scope.where("p.")
    after_at, after_id = after if after is not None else (None, None)
    with connection.cursor() as cursor:
        cursor.execute(
            _ACTION_GROUPS_SQL.format(experiences=experiences, phrases=phrases),
            params | {"after_at": after_at, "after_id": after_id, "count": count},
        )
        rows = cursor.fetchall()
    groups: dict[int, ActionGroup] = {}
    for group_id, last_at, client_id, group_key, key, text, *counts in rows:
        group = groups.setdefault(
            group_id,
            ActionGroup(id=group_id, client_id=client_id, key=group_key, last_at=last_at),
        )
        group.phrasings.append({"text": text or key, "key": key, "experiences": sum(counts)})
        for outcome, number in zip(("success", "failure", "partial"), counts, strict=True):
            group.outcomes[outcome] += number
    return list(groups.values())


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


def skill_owned_named(*, tenant: Tenant, end_user: EndUser, name: str) -> Skill | None:
    """The user's skill of this name that the tenant's own client wrote (not deleted: a
    deleted skill's name is free), or None."""
    return (
        Skill.objects.owned_by(tenant, end_user=end_user)
        .exclude(status=Skill.Status.DELETED)
        .filter(name=name)
        .first()
    )


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


# --- The dashboard's daily series (mirix_site.console): every tenant's, a few days at a time ---


def _utc_day(moment: datetime) -> date:
    return moment.astimezone(UTC).date()


def learning_run_daily_figures(first: date, last: date) -> DailyFigures:
    """Learning runs queued each day, by the state they are in now."""
    figures: DailyFigures = defaultdict(dict)
    rows = (
        LearningRun.objects.filter(created_at__range=utc_day_range(first, last))
        .annotate(day=TruncDate("created_at", tzinfo=UTC))
        .values_list("day", "state")
        .annotate(count=Count("id"))
        .order_by()
    )
    for day, state, count in rows:
        figures[day][state] = float(count)
    return figures


# Versions that change a skill's status, not its text: counted from its status history.
_STATUS_OPERATIONS = ("deprecate", "delete")


def skill_change_daily_figures(first: date, last: date) -> DailyFigures:
    """Skills created and edited each day (their versions), promoted (to active: proven by
    their uses or set by an operator) and demoted (active no more, or deprecated)."""
    start, end = utc_day_range(first, last)
    figures: DailyFigures = defaultdict(dict)
    versions = (
        SkillVersion.objects.filter(created_at__range=(start, end))
        .annotate(day=TruncDate("created_at", tzinfo=UTC))
        .values_list("day", "operation")
        .annotate(count=Count("id"))
        .order_by()
    )
    for day, operation, count in versions:
        if operation in _STATUS_OPERATIONS:
            continue
        key = "created" if operation == "create" else "edited"
        figures[day][key] = figures[day].get(key, 0.0) + count
    for moment, before, after in skill_status_changes(start=start, end=end):
        day = _utc_day(moment)
        if after in PROVEN_STATUSES and before not in PROVEN_STATUSES:
            key = "promoted"
        elif (before in PROVEN_STATUSES and after not in PROVEN_STATUSES) or (
            before in SERVED_STATUSES and after == Skill.Status.DEPRECATED
        ):
            key = "demoted"
        else:
            continue
        figures[day][key] = figures[day].get(key, 0.0) + 1
    return figures


def skill_status_changes(*, start: datetime, end: datetime) -> list[tuple[datetime, str, str]]:
    """Every skill's status changes between ``start`` and ``end``: when, from what, to what
    (its history keeps each change's status before it; what it became is the next change's
    "before" or, for its last change, its status now)."""
    changes = Skill.history.rel.related_model  # type: ignore[attr-defined]
    in_range = changes.objects.filter(pgh_created_at__gte=start, pgh_created_at__lt=end)
    skill_ids = set(in_range.values_list("pgh_obj_id", flat=True))
    if not skill_ids:
        return []
    first_id = in_range.order_by("pgh_id").values_list("pgh_id", flat=True).first()
    events = list(
        changes.objects.filter(pgh_obj_id__in=skill_ids, pgh_id__gte=first_id)
        .order_by("pgh_obj_id", "pgh_id")
        .values_list("pgh_obj_id", "pgh_created_at", "status")
    )
    now = dict(Skill.objects.filter(pk__in=skill_ids).values_list("id", "status"))
    found = []
    for index, (skill_id, moment, before) in enumerate(events):
        following = events[index + 1] if index + 1 < len(events) else None
        after = following[2] if following and following[0] == skill_id else now.get(skill_id)
        if start <= moment < end and after is not None and after != before:
            found.append((moment, before, after))
    return found


def recommendation_daily_figures(first: date, last: date) -> DailyFigures:
    """Recommendations made each day per confidence band (``issued_0.4``: of confidence 0.4 to
    0.6), with the outcomes recorded of following them, their success (a partial is half) and
    their confidence summed (``credit_``/``outcomes_`` is the band's success rate, to set
    against ``confidence_``/``outcomes_``)."""
    figures: DailyFigures = defaultdict(dict)

    def add(day: date, key: str, value: float) -> None:
        figures[day][key] = figures[day].get(key, 0.0) + value

    made = Recommendation.objects.filter(created_at__range=utc_day_range(first, last))
    for created_at, confidence in made.values_list("created_at", "confidence"):
        add(_utc_day(created_at), f"issued_{confidence_band(confidence)[0]:.1f}", 1)
    followed = made.filter(outcomes__isnull=False).values_list(
        "created_at", "confidence", "outcomes__outcome"
    )
    for created_at, confidence, outcome in followed:
        band = f"{confidence_band(confidence)[0]:.1f}"
        day = _utc_day(created_at)
        add(day, f"outcomes_{band}", 1)
        add(day, f"credit_{band}", OUTCOME_SCORES[Outcome(outcome)])
        add(day, f"confidence_{band}", confidence)
    return figures


def skill_uses_by_day(*, skill: Skill) -> DailyFigures:
    """The skill's counted uses per day (when the session that used it closed), by outcome."""
    figures: DailyFigures = defaultdict(dict)
    rows = (
        skill.uses.filter(counted_at__isnull=False)
        .annotate(day=TruncDate("counted_at", tzinfo=UTC))
        .values_list("day", "outcome")
        .annotate(count=Count("id"))
        .order_by()
    )
    for day, outcome, count in rows:
        figures[day][outcome] = float(count)
    return figures
