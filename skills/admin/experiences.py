"""Experiences, the phrasings of their actions and the recommendations made from them: read
here (experiences change through the API, their index following every change)."""

from __future__ import annotations

from django.contrib import admin

from mirix_site.common.admin import ReadOnlyAdmin, history_table
from skills.models import (
    ActionGroupingCalibration,
    ActionPhrase,
    Experience,
    ExperienceSettings,
    Recommendation,
)


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
        "changes",
    ]
    date_hierarchy = "occurred_at"

    @admin.display(description="history")
    def changes(self, row: Experience) -> str:
        return history_table(row)


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
