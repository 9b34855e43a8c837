"""Learning runs, with the sessions each learned from (read-only)."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html

from mirix_site.common.admin import BoundedCountAdmin, ReadOnlyAdmin
from mirix_site.console.panels import list_url
from skills.models import (
    Experience,
    LearningRun,
    LearningRunSession,
)


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
class LearningRunAdmin(BoundedCountAdmin, ReadOnlyAdmin):
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
        "its_experiences",
    ]
    inlines = [LearningRunSessionInline]

    @admin.display(description="experiences")
    def its_experiences(self, run: LearningRun) -> str:
        """The experiences it distilled and those it consumed, as filtered lists."""
        return format_html(
            '<a href="{}">distilled</a> · <a href="{}">consumed</a>',
            list_url(Experience, distilled_by__id__exact=run.pk),
            list_url(Experience, consumed_by__id__exact=run.pk),
        )
