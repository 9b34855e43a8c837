"""Experiences, the phrasings of their actions and the recommendations made from them, learning
runs, and skills with their versions, for operators to browse. Recommendations and versions are
an audit record; experiences and skills change through the API (their index and versions follow
every change), so here they are read."""

from __future__ import annotations

from django.contrib import admin

from accounts.admin import (
    USER_PAGE_ROWS,
    UserPagePart,
    change_link,
    user_page_register,
    user_rows_url,
)
from accounts.models import EndUser
from mirix_site.common.admin import ReadOnlyAdmin
from skills.models import (
    ActionGroupingCalibration,
    ActionPhrase,
    Experience,
    ExperienceSettings,
    LearningRun,
    LearningRunSession,
    Recommendation,
    Skill,
    SkillVersion,
)
from skills.services.skills import skill_confidence


@admin.register(Experience)
class ExperienceAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "task",
        "action",
        "outcome",
        "score",
        "origin",
        "end_user",
        "client",
        "organization",
        "occurred_at",
        "superseded_by",
    ]
    list_filter = ["outcome", "origin", "lesson_type", "status", "client", "occurred_at"]
    search_fields = ["task", "action", "reason", "title", "end_user__user_id"]
    list_select_related = ["end_user", "client", "organization"]
    raw_id_fields = [
        "superseded_by",
        "recommendation",
        "source_session",
        "distilled_by",
        "consumed_by",
    ]
    readonly_fields = [
        "organization",
        "client",
        "end_user",
        "task",
        "action",
        "action_key",
        "outcome",
        "score",
        "reason",
        "context",
        "filter_tags",
        "origin",
        "source_session",
        "source_message_ids",
        "superseded_by",
        "superseded_at",
        "recommendation",
        "occurred_at",
        "title",
        "content",
        "lesson_type",
        "evidence",
        "signal",
        "importance",
        "credibility",
        "status",
        "pool_reason",
        "distilled_by",
        "consumed_by",
        "created_at",
        "updated_at",
    ]
    date_hierarchy = "occurred_at"


@admin.register(Recommendation)
class RecommendationAdmin(ReadOnlyAdmin):
    """Every recommendation made, with the evidence and confidence it was given with."""

    list_display = [
        "created_at",
        "task",
        "action",
        "confidence",
        "successes",
        "failures",
        "partials",
        "explore",
        "end_user",
        "client",
        "organization",
    ]
    list_filter = ["explore", "client", "created_at"]
    search_fields = ["task", "action", "end_user__user_id"]
    list_select_related = ["end_user", "client", "organization"]
    readonly_fields = [
        "organization",
        "client",
        "end_user",
        "task",
        "action",
        "action_key",
        "confidence",
        "successes",
        "failures",
        "partials",
        "supporting_experience_ids",
        "runners_up",
        "explore",
        "created_at",
    ]
    date_hierarchy = "created_at"


@admin.register(ActionPhrase)
class ActionPhraseAdmin(ReadOnlyAdmin):
    """Which phrasings of an action recommend pools, and how near each was to its group's."""

    list_display = ["key", "group_key", "similarity", "model", "end_user", "client", "organization"]
    list_filter = ["model", "client"]
    search_fields = ["key", "group_key", "end_user__user_id"]
    list_select_related = ["end_user", "client", "organization"]
    readonly_fields = [
        "organization",
        "client",
        "end_user",
        "key",
        "group_key",
        "model",
        "similarity",
        "created_at",
    ]
    exclude = ["embedding"]


@admin.register(ActionGroupingCalibration)
class ActionGroupingCalibrationAdmin(ReadOnlyAdmin):
    """Written by `manage.py calibrate_action_grouping`; shown, not edited."""

    list_display = ["model", "threshold", "different_max", "same_above", "same_mean", "measured_at"]
    list_filter = ["model"]
    search_fields = ["model"]
    readonly_fields = [
        "model",
        "threshold",
        "same_pairs",
        "different_pairs",
        "same_mean",
        "different_max",
        "same_above",
        "measured_at",
    ]


@admin.register(ExperienceSettings)
class ExperienceSettingsAdmin(admin.ModelAdmin):
    """Each client's defaults for recall and recommend (PUT /experiences/settings)."""

    list_display = ["client", "organization", "half_life_days", "updated_at"]
    list_filter = ["organization"]
    search_fields = ["client__name", "client__id"]
    list_select_related = ["client", "organization"]
    raw_id_fields = ["organization", "client"]
    readonly_fields = ["updated_at"]


class LearningRunSessionInline(admin.TabularInline):
    model = LearningRunSession
    fields = ["session"]
    readonly_fields = fields
    raw_id_fields = ["session"]
    extra = 0
    can_delete = False

    def has_add_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(LearningRun)
class LearningRunAdmin(ReadOnlyAdmin):
    """Learning runs as a record: their state, counts and error, and the sessions they learn
    from."""

    list_display = [
        "__str__",
        "state",
        "trigger",
        "end_user",
        "client",
        "organization",
        "steps",
        "llm_calls",
        "skills_created",
        "created_at",
        "finished_at",
    ]
    list_filter = ["state", "trigger", "organization", "client"]
    search_fields = ["end_user__user_id", "error"]
    list_select_related = ["end_user", "client", "organization"]
    readonly_fields = [
        "organization",
        "client",
        "end_user",
        "state",
        "trigger",
        "attempts",
        "steps",
        "llm_calls",
        "input_tokens",
        "output_tokens",
        "skills_created",
        "skills_edited",
        "skills_merged",
        "skills_deprecated",
        "experiences_distilled",
        "experiences_consumed",
        "experiences_pooled",
        "warnings",
        "error",
        "created_at",
        "started_at",
        "heartbeat_at",
        "finished_at",
    ]
    inlines = [LearningRunSessionInline]


class SkillVersionInline(admin.TabularInline):
    model = SkillVersion
    fields = ["number", "author", "operation", "run", "needs_review", "note", "created_at"]
    readonly_fields = fields
    raw_id_fields = ["run"]
    extra = 0
    can_delete = False
    ordering = ["-number"]

    def has_add_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(Skill)
class SkillAdmin(ReadOnlyAdmin):
    """Skills with their evidence, review flag and every version (the diffs under each)."""

    list_display = [
        "name",
        "status",
        "version",
        "confidence",
        "successes",
        "failures",
        "needs_review",
        "end_user",
        "client",
        "updated_at",
    ]
    list_filter = ["status", "needs_review", "organization", "client"]
    search_fields = ["name", "description", "end_user__user_id"]
    list_select_related = ["end_user", "client", "organization"]
    readonly_fields = [
        "organization",
        "client",
        "end_user",
        "name",
        "description",
        "triggers",
        "instructions",
        "pitfalls",
        "tools",
        "status",
        "version",
        "successes",
        "failures",
        "partials",
        "learned_successes",
        "learned_failures",
        "learned_partials",
        "needs_review",
        "review_reason",
        "created_at",
        "updated_at",
    ]
    inlines = [SkillVersionInline]

    @admin.display(description="confidence")
    def confidence(self, skill: Skill) -> float:
        return skill_confidence(skill)


@admin.register(SkillVersion)
class SkillVersionAdmin(ReadOnlyAdmin):
    list_display = ["skill", "number", "author", "operation", "run", "needs_review", "created_at"]
    list_filter = ["author", "operation", "needs_review"]
    search_fields = ["skill__name"]
    list_select_related = ["skill", "run"]
    readonly_fields = [
        "skill",
        "number",
        "author",
        "operation",
        "run",
        "experience_ids",
        "snapshot",
        "diff",
        "needs_review",
        "note",
        "operation_key",
        "created_at",
    ]


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
