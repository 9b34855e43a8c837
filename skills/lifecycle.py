"""A skill's lifecycle, declared once: which statuses are served, which an operator may set,
and what its uses call for.

A skill is written ``candidate`` (served, ranked below proven ones), or ``draft`` (kept, not
served) while SKILL_REQUIRE_APPROVAL is on, until an operator approves it. Its uses promote it:
``SKILL_ACTIVATE_SUCCESSES`` successes with the lower bound of its success rate at
``SKILL_ACTIVATE_CONFIDENCE`` or more make it ``active``. Uses that bound its rate below
``SKILL_REVIEW_CONFIDENCE`` (after ``SKILL_REVIEW_MIN_USES``) flag it for review and demote an
active one to candidate. A curator or an operator deprecates it (kept, not served); deletion
keeps the row, not served either. Conversations' procedural memory serves active skills only.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db.models import Q

from skills.confidence import evidence, lower_bound
from skills.models import Skill

# The skills a search serves: candidates and active ones (deprecated and deleted ones are kept).
SERVED_STATUSES = (Skill.Status.CANDIDATE, Skill.Status.ACTIVE)
SERVED = Q(status__in=SERVED_STATUSES)
# The proven ones: what a conversation's procedural memory serves.
PROVEN_STATUSES = (Skill.Status.ACTIVE,)
# What an operator's PATCH may set (deletion is DELETE /memory/procedural/{id}). A draft
# (SKILL_REQUIRE_APPROVAL) leaves its status only by an operator's approval.
OPERATOR_STATUSES = (Skill.Status.CANDIDATE, Skill.Status.ACTIVE, Skill.Status.DEPRECATED)
# The admin's list actions: a served skill is deprecated; a deprecated one restored (a
# candidate again, to prove itself anew).
DEPRECATABLE_STATUSES = SERVED_STATUSES
RESTORABLE_STATUSES = (Skill.Status.DEPRECATED,)


def served(skill: Skill) -> bool:
    return skill.status in SERVED_STATUSES


@dataclass(frozen=True)
class UsesVerdict:
    """What a skill's uses call for: its status, and whether (and why) it needs review."""

    status: str
    needs_review: bool
    review_reason: str


def uses_verdict(skill: Skill) -> UsesVerdict:
    """The status and review flag the skill's counted uses call for: promoted, flagged and
    demoted, or as it is. Reads the skill; changes nothing."""
    successes, failures = evidence(
        successes=skill.successes, failures=skill.failures, partials=skill.partials
    )
    bound = lower_bound(successes=successes, failures=failures)
    status, needs_review, reason = skill.status, skill.needs_review, skill.review_reason
    if (
        status == Skill.Status.CANDIDATE
        and skill.successes >= settings.SKILL_ACTIVATE_SUCCESSES
        and bound >= settings.SKILL_ACTIVATE_CONFIDENCE
    ):
        status = Skill.Status.ACTIVE
    uses = skill.successes + skill.failures + skill.partials
    if uses >= settings.SKILL_REVIEW_MIN_USES and bound < settings.SKILL_REVIEW_CONFIDENCE:
        needs_review = True
        reason = (
            f"Sessions that used it: {skill.successes} succeeded, {skill.failures} failed, "
            f"{skill.partials} partly; its success rate is bounded below "
            f"{settings.SKILL_REVIEW_CONFIDENCE:g}."
        )
        if status == Skill.Status.ACTIVE:
            status = Skill.Status.CANDIDATE
    return UsesVerdict(status=status, needs_review=needs_review, review_reason=reason)
