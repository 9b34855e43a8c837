"""Skills curated here: an edit is a new version written by the skills service, versions
compare side by side and restore, skills are deprecated and restored, and drafts and
proposals wait for an operator's approval (SKILL_REQUIRE_APPROVAL). Versions are an audit
record."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.safestring import mark_safe

from mirix_site.common.admin import BoundedCountAdmin, ReadOnlyAdmin, StoredText, history_table
from mirix_site.console.charts import Series, daily_chart
from skills.content import SkillContent, content_diff_table
from skills.lifecycle import DEPRECATABLE_STATUSES, OPERATOR_STATUSES, RESTORABLE_STATUSES
from skills.models import (
    Outcome,
    Skill,
    SkillProposal,
    SkillVersion,
)
from skills.selectors import skill_uses_by_day
from skills.services.skills import (
    SkillConflictError,
    Written,
    skill_change,
    skill_confidence,
    skill_draft_approve,
    skill_proposal_approve,
    skill_proposal_reject,
    skill_version_restore,
)


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


# The fields a skill's versions hold.
SKILL_TEXT_FIELDS = ("name", "description", "triggers", "instructions", "pitfalls")


class LinesField(forms.CharField):
    """A list of texts edited one per line (blank lines dropped)."""

    widget = forms.Textarea(attrs={"rows": 4, "cols": 80})

    def prepare_value(self, value: Any) -> Any:
        return "\n".join(value) if isinstance(value, list | tuple) else value

    def to_python(self, value: Any) -> list[str]:
        text = super().to_python(value) or ""
        return [line.strip() for line in text.splitlines() if line.strip()]


class SkillForm(forms.ModelForm):
    """An operator's edit: the text a version holds, the status an operator may set, and why.
    Checked by the rules every version is (``SkillContent.errors``) before anything is written."""

    description = StoredText(max_length=1024, widget=forms.Textarea(attrs={"rows": 3, "cols": 80}))
    instructions = StoredText(required=False, widget=forms.Textarea(attrs={"rows": 12, "cols": 80}))
    triggers = LinesField(required=False, help_text="one phrasing of a request per line")
    pitfalls = LinesField(required=False, help_text="one per line")
    status = forms.ChoiceField(choices=[(status, status) for status in OPERATOR_STATUSES])
    note = forms.CharField(
        required=False, max_length=500, help_text="why: kept with the version this writes"
    )

    class Meta:
        model = Skill
        fields = ["name", "description", "triggers", "instructions", "pitfalls", "status"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.status not in OPERATOR_STATUSES:  # deleted: shown, not set again
            self.fields["status"].choices = [(self.instance.status, self.instance.status)]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        skill = self.instance
        content = SkillContent.from_snapshot(
            {
                **SkillContent.of(skill).snapshot(),
                **{name: cleaned[name] for name in SKILL_TEXT_FIELDS if name in cleaned},
            }
        )
        for name, problems in content.errors().items():
            for problem in problems:
                self.add_error(name if name in self.fields else None, problem)
        taken = (
            Skill.objects.filter(end_user=skill.end_user_id, client=skill.client_id)
            .exclude(pk=skill.pk)
            .exclude(status=Skill.Status.DELETED)
            .filter(name=cleaned.get("name"))
        )
        if "name" in self.changed_data and taken.exists():
            self.add_error("name", "This user already has a skill of that name.")
        return cleaned


# The days a skill's uses are drawn over, on its page.
SKILL_USE_DAYS = 30


@admin.register(Skill)
class SkillAdmin(admin.ModelAdmin):
    """Skills with their evidence, review flag and every version. An operator's edit writes
    version N+1 (author ``operator``) through the skills service, never the row in place; any
    two versions compare side by side, and any one can be restored (a new version, author
    ``rollback``). Deprecating and restoring are list actions."""

    form = SkillForm
    change_form_template = "admin/skills/skill/change_form.html"
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
        "uses_over_time",
        "status_changes",
    ]
    inlines = [SkillVersionInline]
    actions = ["approve_drafts", "deprecate_selected", "restore_selected"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # skills are learned, imported or written through the API

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # deprecated (kept, not served), or gone with their user

    @admin.display(description="confidence")
    def confidence(self, skill: Skill) -> float:
        return skill_confidence(skill)

    @admin.display(description="uses over time")
    def uses_over_time(self, skill: Skill) -> str:
        today = timezone.now().date()
        days = [today - timedelta(days=back) for back in range(SKILL_USE_DAYS - 1, -1, -1)]
        uses = skill_uses_by_day(skill=skill)
        return daily_chart(
            days,
            [
                Series(
                    outcome, {day: keys[outcome] for day, keys in uses.items() if outcome in keys}
                )
                for outcome in Outcome.values
            ],
            label="the skill's uses per day by outcome",
        )

    @admin.display(description="status changes")
    def status_changes(self, skill: Skill) -> str:
        return history_table(skill)

    def save_model(self, request: HttpRequest, obj: Skill, form: Any, change: bool) -> None:
        changes = {
            name: form.cleaned_data[name]
            for name in form.changed_data
            if name in (*SKILL_TEXT_FIELDS, "status")
        }
        if not changes:
            self.message_user(request, "Nothing changed.", level=messages.INFO)
            return
        written = skill_change(skill=obj, changes=changes, note=form.cleaned_data.get("note", ""))
        if isinstance(written, Written):
            self.message_user(
                request, f"Saved as version {written.version.number}.", level=messages.SUCCESS
            )

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return super().log_change(request, obj, message) if message else None

    def get_urls(self) -> list[Any]:
        own = [
            path(
                "<path:object_id>/diff/",
                self.admin_site.admin_view(self.diff_view),
                name="skills_skill_diff",
            ),
            path(
                "<path:object_id>/rollback/<int:number>/",
                self.admin_site.admin_view(self.rollback_view),
                name="skills_skill_rollback",
            ),
        ]
        return own + super().get_urls()

    def _skill(self, request: HttpRequest, object_id: str) -> Skill:
        skill = self.get_object(request, unquote(object_id))
        if skill is None or not self.has_view_permission(request, skill):
            raise Http404("No such skill.")
        return skill

    def diff_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Any two versions side by side (``?a=&b=``; by default the one before the latest
        against the latest)."""
        skill = self._skill(request, object_id)
        versions = {version.number: version for version in skill.versions.all()}
        latest = skill.version

        def number(name: str, default: int) -> int:
            try:
                value = int(request.GET.get(name, default))
            except ValueError:
                value = default
            return value if value in versions else default

        b = number("b", latest)
        a = number("a", max(min(versions, default=b), b - 1))
        table = content_diff_table(
            SkillContent.from_snapshot(versions[a].snapshot),
            SkillContent.from_snapshot(versions[b].snapshot),
            numbers=(a, b),
        )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"{skill.name}: version {a} against version {b}",
            "skill": skill,
            "versions": [versions[key] for key in sorted(versions, reverse=True)],
            "a": a,
            "b": b,
            "table": mark_safe(table),  # noqa: S308 - difflib escapes the versions' text
            "can_change": self.has_change_permission(request, skill),
        }
        return TemplateResponse(request, "admin/skills/skill/diff.html", context)

    def rollback_view(self, request: HttpRequest, object_id: str, number: int) -> HttpResponse:
        skill = self._skill(request, object_id)
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_change_permission(request, skill):
            raise PermissionDenied
        try:
            written = skill_version_restore(skill=skill, number=number)
        except SkillConflictError as error:
            self.message_user(request, str(error), level=messages.ERROR)
        else:
            self.log_change(request, skill, f"Restored version {number}.")
            self.message_user(
                request,
                f"Version {number} restored as version {written.version.number}.",
                level=messages.SUCCESS,
            )
        return HttpResponseRedirect(reverse("admin:skills_skill_change", args=[skill.pk]))

    def _status_set(
        self, request: HttpRequest, queryset: Any, status: str, *, of: tuple[str, ...]
    ) -> None:
        changed = 0
        for skill in queryset.exclude(status=Skill.Status.DELETED):
            if skill.status in of:
                skill_change(skill=skill, changes={"status": status})
                changed += 1
        self.message_user(request, f"{changed} skill(s) now {status}.", level=messages.SUCCESS)

    @admin.action(description="Approve selected drafts (served from now on, as candidates)")
    def approve_drafts(self, request: HttpRequest, queryset: Any) -> None:
        approved = 0
        for skill in queryset.filter(status=Skill.Status.DRAFT):
            skill_draft_approve(skill=skill)
            self.log_change(request, skill, "Approved the draft.")
            approved += 1
        self.message_user(request, f"{approved} draft(s) approved.", level=messages.SUCCESS)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        skill = self.get_object(request, unquote(object_id))
        pending = (
            SkillProposal.objects.filter(skill=skill, state=SkillProposal.State.PENDING).count()
            if skill is not None
            else 0
        )
        context = {
            **(extra_context or {}),
            "pending_proposals": pending,
            "proposals_url": reverse("admin:skills_skillproposal_changelist")
            + f"?skill__id__exact={object_id}&state__exact=pending",
        }
        return super().change_view(request, object_id, form_url, context)

    @admin.action(description="Deprecate selected skills (kept, no longer served)")
    def deprecate_selected(self, request: HttpRequest, queryset: Any) -> None:
        self._status_set(
            request,
            queryset,
            Skill.Status.DEPRECATED,
            of=DEPRECATABLE_STATUSES,
        )

    @admin.action(description="Restore selected deprecated skills (served again, as candidates)")
    def restore_selected(self, request: HttpRequest, queryset: Any) -> None:
        self._status_set(request, queryset, Skill.Status.CANDIDATE, of=RESTORABLE_STATUSES)


@admin.register(SkillProposal)
class SkillProposalAdmin(ReadOnlyAdmin):
    """A curator's changes that wait for an operator (SKILL_REQUIRE_APPROVAL): each shown
    against the skill as it is now, approved (the skill's next version) or rejected."""

    list_display = ["__str__", "skill", "state", "base_version", "run", "end_user", "created_at"]
    list_filter = ["state", "operation", "organization", "client"]
    search_fields = ["skill__name", "note", "end_user__user_id"]
    list_select_related = ["skill", "run", "end_user"]

    def get_urls(self) -> list[Any]:
        own = [
            path(
                f"<path:object_id>/{decision}/",
                self.admin_site.admin_view(self.decide_view),
                {"decision": decision},
                name=f"skills_skillproposal_{decision}",
            )
            for decision in ("approve", "reject")
        ]
        return own + super().get_urls()

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        proposal = self.get_object(request, unquote(object_id))
        if proposal is None:
            raise Http404("No such proposal.")
        skill = proposal.skill
        table = content_diff_table(
            SkillContent.of(skill),
            SkillContent.from_snapshot(proposal.snapshot),
            numbers=(skill.version, skill.version + 1),
        )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"{proposal.operation} of {skill.name}: the current version, then the "
            "proposal",
            "proposal": proposal,
            "skill": skill,
            "table": mark_safe(table),  # noqa: S308 - difflib escapes the texts
            "merged": Skill.objects.filter(pk__in=proposal.merged_skill_ids),
            "stale": proposal.base_version != skill.version,
            "can_decide": proposal.state == SkillProposal.State.PENDING
            and request.user.has_perm("skills.change_skill"),
        }
        return TemplateResponse(request, "admin/skills/skillproposal/review.html", context)

    def decide_view(self, request: HttpRequest, object_id: str, decision: str) -> HttpResponse:
        proposal = self.get_object(request, unquote(object_id))
        if proposal is None or decision not in ("approve", "reject"):
            raise Http404("No such proposal.")
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not request.user.has_perm("skills.change_skill"):
            raise PermissionDenied
        try:
            if decision == "approve":
                written = skill_proposal_approve(proposal=proposal)
                said = f"Approved: version {written.version.number} of {written.skill.name}."
            else:
                skill_proposal_reject(proposal=proposal)
                said = "Rejected: the skill is unchanged."
        except SkillConflictError as error:
            self.message_user(request, str(error), level=messages.ERROR)
        else:
            self.log_change(request, proposal, said)
            self.message_user(request, said, level=messages.SUCCESS)
        return HttpResponseRedirect(
            reverse("admin:skills_skillproposal_change", args=[proposal.pk])
        )


@admin.register(SkillVersion)
class SkillVersionAdmin(BoundedCountAdmin, ReadOnlyAdmin):
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
