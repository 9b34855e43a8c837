"""Experiences, the phrasings of their actions and the recommendations made from them: read
here (experiences change through the API, their index following every change). An operator
supersedes an experience, merges action groups and splits a phrasing out of its group, each
through its service."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from accounts.tenancy import Tenant
from mirix_site.common.admin import BoundedCountAdmin, ReadOnlyAdmin, history_table
from mirix_site.common.errors import DomainError, NotFoundError
from skills.models import (
    ActionGroupingCalibration,
    ActionPhrase,
    Experience,
    ExperienceSettings,
    Recommendation,
)
from skills.services.experiences import experience_supersede
from skills.services.grouping import (
    ActionGroupingError,
    action_groups_merge,
    action_phrase_split,
)


class SupersededFilter(admin.SimpleListFilter):
    title = "superseded"
    parameter_name = "superseded"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("no", "current"), ("yes", "superseded")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() in ("yes", "no"):
            return queryset.filter(superseded_by__isnull=self.value() == "no")
        return queryset


class SupersedeForm(forms.Form):
    by = forms.IntegerField(
        label="Superseded by experience", help_text="The id of the experience that replaces it."
    )


@admin.register(Experience)
class ExperienceAdmin(BoundedCountAdmin, ReadOnlyAdmin):
    """Experiences as recorded, filtered by outcome, origin, user (from their page) or learning
    run (from its page). They change through the API; here an operator can mark one superseded
    by another of the same user and client (the API's supersede)."""

    change_form_template = "admin/skills/experience/change_form.html"
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
    list_filter = [
        "outcome",
        "origin",
        SupersededFilter,
        "lesson_type",
        "status",
        "client",
        "occurred_at",
    ]
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

    def get_urls(self) -> list[Any]:
        return [
            path(
                "<path:object_id>/supersede/",
                self.admin_site.admin_view(self.supersede_view),
                name="skills_experience_supersede",
            ),
            *super().get_urls(),
        ]

    def supersede_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Mark the experience superseded by another of its user's, through the service."""
        if not request.user.has_perm("skills.change_experience"):
            raise PermissionDenied
        experience = self.get_object(request, unquote(object_id))
        if experience is None:
            raise Http404
        form = SupersedeForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            by = Experience.objects.filter(pk=form.cleaned_data["by"]).first()
            if by is None:
                form.add_error("by", "No experience has this id.")
            else:
                tenant = Tenant(organization=experience.organization, client=experience.client)
                try:
                    experience_supersede(tenant=tenant, experience=experience, by=by)
                except NotFoundError:
                    form.add_error(
                        "by", "The replacement must be an experience of the same user and client."
                    )
                except DomainError as error:
                    form.add_error("by", str(error))
                else:
                    self.message_user(
                        request, f"Superseded by experience {by.pk}.", level=messages.SUCCESS
                    )
                    return HttpResponseRedirect(
                        reverse("admin:skills_experience_change", args=[experience.pk])
                    )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "original": experience,
            "form": form,
            "title": f"Supersede experience {experience.pk}",
        }
        return TemplateResponse(request, "admin/skills/experience/supersede.html", context)


@admin.register(Recommendation)
class RecommendationAdmin(BoundedCountAdmin, ReadOnlyAdmin):
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


class MergeForm(forms.Form):
    into = forms.ChoiceField(label="Into the group of", widget=forms.RadioSelect)

    def __init__(self, *args: Any, phrases: list[ActionPhrase], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        firsts = {phrase.group_key: phrase for phrase in reversed(phrases)}
        self.fields["into"].choices = [
            (str(phrase.pk), phrase.group_key) for phrase in reversed(firsts.values())
        ]
        self.fields["into"].initial = str(phrases[0].pk)


@admin.register(ActionPhrase)
class ActionPhraseAdmin(BoundedCountAdmin, ReadOnlyAdmin):
    """Which phrasings of an action recommend pools, and how near each was to its group's. An
    operator merges the groups of selected phrasings (an action on the list) or splits one
    phrasing out of its group (its page), each confirmed first and kept in its history."""

    change_form_template = "admin/skills/actionphrase/change_form.html"
    list_display = [
        "key",
        "group_key",
        "text",
        "similarity",
        "model",
        "end_user",
        "client",
        "organization",
    ]
    list_filter = ["model", "client"]
    search_fields = ["key", "group_key", "text", "end_user__user_id"]
    list_select_related = ["end_user", "client", "organization"]
    readonly_fields = [
        "organization",
        "client",
        "end_user",
        "key",
        "text",
        "group_key",
        "group_phrasings",
        "apart_from",
        "model",
        "similarity",
        "created_at",
        "changes",
    ]
    exclude = ["embedding"]
    actions = ["merge_groups"]

    @admin.display(description="phrasings of its group")
    def group_phrasings(self, phrase: ActionPhrase) -> str:
        return ", ".join(
            ActionPhrase.objects.filter(**phrase.owner_ids, group_key=phrase.group_key)
            .order_by("created_at", "id")
            .values_list("key", flat=True)
        )

    @admin.display(description="history")
    def changes(self, phrase: ActionPhrase) -> str:
        return history_table(phrase)

    def _may_curate(self, request: HttpRequest) -> None:
        if not request.user.has_perm("skills.change_actionphrase"):
            raise PermissionDenied

    @admin.action(description="Merge the selected phrasings' groups into one")
    def merge_groups(
        self, request: HttpRequest, queryset: QuerySet[ActionPhrase]
    ) -> HttpResponse | None:
        self._may_curate(request)
        phrases = list(queryset.defer("embedding").order_by("created_at", "id"))
        owners = {(p.organization_id, p.client_id, p.end_user_id) for p in phrases}
        if len(owners) != 1 or len({p.group_key for p in phrases}) < 2:
            self.message_user(
                request,
                "Select phrasings of at least two groups, of one user and one client.",
                level=messages.ERROR,
            )
            return None
        form = MergeForm(request.POST if "confirm" in request.POST else None, phrases=phrases)
        if form.is_valid():
            into = next(p for p in phrases if str(p.pk) == form.cleaned_data["into"])
            try:
                moved = action_groups_merge(into=into, phrases=phrases)
            except ActionGroupingError as error:
                self.message_user(request, str(error), level=messages.ERROR)
            else:
                self.message_user(
                    request,
                    f"{moved} phrasing(s) joined the group {into.group_key!r}.",
                    level=messages.SUCCESS,
                )
            return None
        groups: dict[str, list[str]] = {}
        for phrase in ActionPhrase.objects.filter(
            organization_id=phrases[0].organization_id,
            client_id=phrases[0].client_id,
            end_user_id=phrases[0].end_user_id,
            group_key__in={p.group_key for p in phrases},
        ).order_by("created_at", "id"):
            groups.setdefault(phrase.group_key, []).append(phrase.text or phrase.key)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Merge action groups",
            "form": form,
            "groups": groups,
            "phrases": phrases,
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/skills/actionphrase/merge.html", context)

    def get_urls(self) -> list[Any]:
        return [
            path(
                "<path:object_id>/split/",
                self.admin_site.admin_view(self.split_view),
                name="skills_actionphrase_split",
            ),
            *super().get_urls(),
        ]

    def split_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Confirm, then split the phrasing out of its group into one of its own."""
        self._may_curate(request)
        phrase = self.get_object(request, unquote(object_id))
        if phrase is None:
            raise Http404
        if request.method == "POST":
            try:
                action_phrase_split(phrase=phrase)
            except ActionGroupingError as error:
                self.message_user(request, str(error), level=messages.ERROR)
            else:
                self.message_user(
                    request, "Split out into a group of its own.", level=messages.SUCCESS
                )
            return HttpResponseRedirect(
                reverse("admin:skills_actionphrase_change", args=[phrase.pk])
            )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "original": phrase,
            "others": ActionPhrase.objects.filter(**phrase.owner_ids, group_key=phrase.group_key)
            .exclude(pk=phrase.pk)
            .order_by("created_at", "id"),
            "title": f"Split {phrase.key!r} out of its group",
        }
        return TemplateResponse(request, "admin/skills/actionphrase/split.html", context)


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
