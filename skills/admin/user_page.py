"""An end user's page: their skills, experiences and learning runs."""

from __future__ import annotations

from accounts.admin import (
    USER_PAGE_ROWS,
    UserPagePart,
    change_link,
    user_page_register,
    user_rows_url,
)
from accounts.models import EndUser
from skills.models import (
    Experience,
    LearningRun,
    Skill,
)
from skills.services.skills import (
    skill_confidence,
)


def _clipped(text: str, chars: int = 80) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _user_skills_and_experiences(end_user: EndUser) -> list[UserPagePart]:
    skills = Skill.objects.filter(end_user=end_user)
    experiences = Experience.objects.filter(end_user=end_user)
    runs = LearningRun.objects.filter(end_user=end_user)
    return [
        UserPagePart(
            title="Skills",
            headers=[
                "skill",
                "client",
                "status",
                "version",
                "uses (ok / failed / partial)",
                "confidence",
            ],
            rows=[
                [
                    change_link(skill, skill.name),
                    skill.client,
                    skill.status,
                    skill.version,
                    f"{skill.successes} / {skill.failures} / {skill.partials}",
                    f"{skill_confidence(skill):.3f}",
                ]
                for skill in skills.select_related("client").order_by("-updated_at", "-id")[
                    :USER_PAGE_ROWS
                ]
            ],
            total=skills.count(),
            more_url=user_rows_url(Skill, end_user),
        ),
        UserPagePart(
            title="Experiences",
            headers=["task", "action", "outcome", "origin", "client", "occurred"],
            rows=[
                [
                    change_link(experience, _clipped(experience.task)),
                    _clipped(experience.action),
                    experience.outcome,
                    experience.origin,
                    experience.client,
                    experience.occurred_at,
                ]
                for experience in experiences.select_related("client").order_by(
                    "-occurred_at", "-id"
                )[:USER_PAGE_ROWS]
            ],
            total=experiences.count(),
            more_url=user_rows_url(Experience, end_user),
        ),
        UserPagePart(
            title="Learning runs",
            headers=["run", "client", "state", "trigger", "created"],
            rows=[
                [change_link(run), run.client, run.state, run.trigger, run.created_at]
                for run in runs.select_related("client").order_by("-created_at", "-id")[
                    :USER_PAGE_ROWS
                ]
            ],
            total=runs.count(),
            more_url=user_rows_url(LearningRun, end_user),
        ),
    ]


user_page_register(30, _user_skills_and_experiences)
