"""Recall (the experiences relevant to a query) and recommend (the best-supported action for a
task), both through the one retrieval engine.

Recommend groups the relevant experiences by action (``skills.services.grouping``) and bounds
each group's success rate (``skills.confidence``). The bound comes from the raw counts alone;
relevance (the experiences' similarity to the task) and recency (a half-life, when asked for)
only choose which action wins, as Mimir does, so a confidence means the same whatever the
query. An action that has only failed is never recommended.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

import numpy as np
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from accounts.models import EndUser
from accounts.tenancy import Tenant
from mirix_site.search.engine import Hit, SearchOutcome, SearchRequest
from mirix_site.search.services import retrieval_search
from sessions.sensitive import sensitive_redacted, sensitive_redacted_json
from skills.confidence import evidence, lower_bounds, posterior_draws
from skills.models import CURRENT, Outcome, Recommendation
from skills.search import EXPERIENCE_KIND
from skills.services.grouping import action_groups_of

DAY_SECONDS = 86_400.0
# What recommend reads of each of the (up to RECOMMEND_EVIDENCE) experiences it weighs.
RECOMMEND_READS = ("action", "action_key", "outcome", "occurred_at")


def decay(*, occurred_at: datetime, now: datetime, half_life_days: float | None) -> float:
    """An experience's weight for its age: halved every ``half_life_days`` (None: 1)."""
    if not half_life_days:
        return 1.0
    age_days = max((now - occurred_at).total_seconds(), 0.0) / DAY_SECONDS
    return 2.0 ** (-age_days / half_life_days)


def _context_condition(context: dict[str, str]) -> Q:
    """``context.<key>=<value>`` filters: the key may be a dotted path into nested objects;
    the value matches as the JSON it spells (3, true, null; a number too large for a float,
    1e309, only as text) or as the text it is, redacted as stored contexts are."""
    condition = Q()
    for path, text in context.items():
        values: list[Any] = [text]
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = text
        finite = not isinstance(parsed, float) or math.isfinite(parsed)
        if parsed != text and finite and not isinstance(parsed, dict | list):
            values.append(parsed)
        either = Q()
        for value in values:
            nested: Any = value
            for key in reversed(path.split(".")):
                nested = {key: nested}
            either |= Q(context__contains=sensitive_redacted_json(nested))
        condition &= either
    return condition


def experiences_recall(
    *,
    tenant: Tenant,
    end_user: EndUser,
    query: str,
    k: int,
    outcome: str | None = None,
    context: dict[str, str] | None = None,
    include_superseded: bool = False,
    half_life_days: float | None = None,
    method: str = "hybrid",
) -> SearchOutcome:
    """The ``k`` experiences most relevant to the query, of the user, that the tenant may
    read. A half-life reweights the ranking by age (over four times ``k`` candidates), never
    what is counted."""
    rows = Q() if include_superseded else CURRENT
    if outcome is not None:
        rows &= Q(outcome=outcome)
    if context:
        rows &= _context_condition(context)
    request = SearchRequest(
        kinds=(EXPERIENCE_KIND,),
        query=query,
        method=method,
        limit=k * 4 if half_life_days else k,
        # The kind's own current rows need no list of allowed ids: the lanes run unfiltered.
        rows=None if rows == CURRENT else rows,
    )
    found = retrieval_search(
        tenant=tenant,
        end_user=end_user,
        endpoint="experiences/recall",
        request=request,
        extra={"outcome": outcome, "context": context or {}, "half_life_days": half_life_days},
    )
    if half_life_days:
        now = timezone.now()
        for hit in found.hits:
            hit.candidate.score *= decay(
                occurred_at=hit.row.occurred_at, now=now, half_life_days=half_life_days
            )
        found.hits.sort(key=lambda hit: -hit.candidate.score)
        del found.hits[k:]
    return found


@dataclass
class ActionRecord:
    """One action (a group of phrasings) and its evidence among the relevant experiences."""

    key: str
    hits: list[Hit] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)

    @cached_property
    def counts(self) -> dict[str, int]:
        """Read once every hit is in."""
        tally = Counter(hit.row.outcome for hit in self.hits)
        return {
            "success": tally[Outcome.SUCCESS],
            "failure": tally[Outcome.FAILURE],
            "partial": tally[Outcome.PARTIAL],
            "total": len(self.hits),
        }

    @property
    def action(self) -> str:
        """The phrasing its experiences use most (the most recent among equals)."""
        latest: dict[str, datetime] = {}
        uses: Counter[str] = Counter()
        for hit in self.hits:
            uses[hit.row.action] += 1
            latest[hit.row.action] = max(
                latest.get(hit.row.action, hit.row.occurred_at), hit.row.occurred_at
            )
        return max(uses, key=lambda phrasing: (uses[phrasing], latest[phrasing]))

    @property
    def supporting_ids(self) -> list[int]:
        return [hit.row.pk for hit in self.hits]


@dataclass
class Recommended:
    """What recommend answers: the winner (None: nothing to recommend, and why), the others
    ranked after it, and the search behind them."""

    task: str
    mode: str
    why: str
    outcome: SearchOutcome
    winner: dict[str, Any] | None = None
    runners_up: list[dict[str, Any]] = field(default_factory=list)
    recommendation: Recommendation | None = None


def _relevance(hit: Hit, best_score: float) -> float:
    """How closely an experience matches the task: its cosine similarity to it, or (before it
    is embedded) its fused score against the best one's."""
    if hit.candidate.similarity is not None:
        return min(max(hit.candidate.similarity, 0.0), 1.0)
    return hit.candidate.score / best_score if best_score > 0 else 0.0


def _summary(record: ActionRecord, confidence: float, rank: float) -> dict[str, Any]:
    return {
        "action": record.action,
        "action_key": record.key,
        "confidence": round(confidence, 4),
        "counts": record.counts,
        "supporting_experience_ids": [str(pk) for pk in record.supporting_ids],
        "rank_score": round(rank, 4),
        "relevance": round(float(np.mean(record.weights)), 4),
    }


def experience_recommend(
    *,
    tenant: Tenant,
    end_user: EndUser,
    task: str,
    explore: bool = False,
    seed: int | None = None,
    weight_by_relevance: bool = True,
    include_superseded: bool = False,
    half_life_days: float | None = None,
) -> Recommended:
    """The best-supported action for the task among the user's relevant experiences (see the
    module's docstring), recorded as a Recommendation whose id an outcome can cite. Not one
    transaction: inside one, the search's lanes could not run beside each other (their
    connections would not see its rows), and what it writes are two independent rows (the
    retrieval log, the recommendation)."""
    mode = "explore" if explore else "exploit"
    found = retrieval_search(
        tenant=tenant,
        end_user=end_user,
        endpoint="experiences/recommend",
        request=SearchRequest(
            kinds=(EXPERIENCE_KIND,),
            query=task,
            method="hybrid",
            limit=settings.RECOMMEND_EVIDENCE,
            rows=Q() if include_superseded else None,
            fields=RECOMMEND_READS,
        ),
        extra={"explore": explore, "seed": seed, "half_life_days": half_life_days},
    )
    if not found.hits:
        return Recommended(task, mode, "No relevant experience of this user.", found)
    groups = action_groups_of([hit.row for hit in found.hits])
    best_score = max(hit.candidate.score for hit in found.hits)
    now = timezone.now()
    records: dict[str, ActionRecord] = {}
    for hit in found.hits:
        key = groups[hit.row.pk]
        record = records.setdefault(key, ActionRecord(key=key))
        record.hits.append(hit)
        record.weights.append(
            _relevance(hit, best_score)
            * decay(occurred_at=hit.row.occurred_at, now=now, half_life_days=half_life_days)
        )
    candidates = [
        record
        for record in records.values()
        if record.counts["success"] + record.counts["partial"] > 0
    ]
    if not candidates:
        return Recommended(
            task,
            mode,
            f"Every action of the {len(found.hits)} relevant experiences has only failed.",
            found,
        )
    s, f = zip(
        *(
            evidence(
                successes=record.counts["success"],
                failures=record.counts["failure"],
                partials=record.counts["partial"],
            )
            for record in candidates
        ),
        strict=True,
    )
    confidences = lower_bounds(s, f)
    scores = posterior_draws(s, f, rng=np.random.default_rng(seed)) if explore else confidences
    weights = np.array([np.mean(record.weights) for record in candidates])
    ranks = scores * weights if weight_by_relevance else scores
    # Ties go to more evidence, then to the most recent.
    order = sorted(
        range(len(candidates)),
        key=lambda i: (
            -ranks[i],
            -candidates[i].counts["total"],
            -max(hit.row.occurred_at.timestamp() for hit in candidates[i].hits),
        ),
    )
    summaries = [_summary(candidates[i], float(confidences[i]), float(ranks[i])) for i in order]
    winner, runners_up = summaries[0], summaries[1 : 1 + settings.RECOMMEND_RUNNERS_UP]
    recommendation = Recommendation.objects.create(
        organization_id=tenant.organization.pk,
        client_id=tenant.client.pk,
        end_user=end_user,
        task=sensitive_redacted(task),
        action=winner["action"],
        action_key=winner["action_key"],
        confidence=winner["confidence"],
        successes=winner["counts"]["success"],
        failures=winner["counts"]["failure"],
        partials=winner["counts"]["partial"],
        supporting_experience_ids=[int(pk) for pk in winner["supporting_experience_ids"]],
        runners_up=runners_up,
        explore=explore,
    )
    return Recommended(
        task,
        mode,
        _why(winner, runners_up, mode=mode, weighted=weight_by_relevance, decayed=half_life_days),
        found,
        winner=winner,
        runners_up=runners_up,
        recommendation=recommendation,
    )


def _why(
    winner: dict[str, Any],
    runners_up: list[dict[str, Any]],
    *,
    mode: str,
    weighted: bool,
    decayed: float | None,
) -> str:
    counts = winner["counts"]
    record = (
        f"{counts['success']} success(es), {counts['failure']} failure(s) and "
        f"{counts['partial']} partial(s) in {counts['total']} relevant experience(s)"
    )
    bound = (
        f"confidence {winner['confidence']:.4f} is the 5% lower bound of the success rate "
        "(Beta posterior, Jeffreys prior)"
    )
    ranked_by = "a draw from each action's posterior" if mode == "explore" else "confidence"
    if weighted:
        ranked_by += " times the evidence's relevance to the task"
        if decayed:
            ranked_by += f" and its recency (half-life {decayed:g} days)"
    text = f"{winner['action']!r}: {record}; {bound}. Ranked by {ranked_by}"
    if runners_up:
        other = runners_up[0]
        text += (
            f": {winner['rank_score']:.4f} against {other['rank_score']:.4f} for "
            f"{other['action']!r} (confidence {other['confidence']:.4f})"
        )
    return text + "."


def skills_retrieve(
    *,
    tenant: Tenant,
    end_user: EndUser,
    task: str,
    limit: int,
    session_id: int | None = None,
    statuses: tuple[str, ...] | None = None,
    method: str = "hybrid",
    endpoint: str = "skills/retrieve",
    log: bool = True,
) -> SearchOutcome:
    """The skills most relevant to the task (candidates and active ones), through the engine's
    hybrid search and the gate calibrated for skills and the model. Of equal relevance, a
    proven (active) skill ranks before a candidate. ``session_id``: the task session they are
    retrieved for (the caller's own), whose outcome will count as evidence for those of them the
    caller's client owns when it closes. ``statuses``:
    only skills in these (active ones, for a conversation's procedures)."""
    from skills.models import Skill
    from skills.search import SKILL_KIND
    from skills.services.skills import skill_uses_record

    found = retrieval_search(
        tenant=tenant,
        end_user=end_user,
        endpoint=endpoint,
        request=SearchRequest(
            kinds=(SKILL_KIND,),
            query=task,
            method=method,
            limit=limit,
            rows=Q(status__in=statuses) if statuses is not None else None,
        ),
        extra={"session_id": session_id},
        log=log,
    )
    found.hits.sort(
        key=lambda hit: (-round(hit.candidate.score, 9), hit.row.status != Skill.Status.ACTIVE)
    )
    if session_id is not None and found.hits:
        # A use is evidence the skill's owner counts: only the caller's own skills get one
        # (another client's, read through a scope, are read-only in every sense).
        owned = [hit.row for hit in found.hits if tenant.owns(hit.row)]
        skill_uses_record(skills=owned, session_id=session_id)
    return found
