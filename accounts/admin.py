"""Operators manage tenants, clients, API keys and end users here."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.text import capfirst

from accounts.models import ApiKey, Client, EndUser, Organization, UserImport
from accounts.services import (
    api_key_create,
    api_key_delete,
    api_key_revoke,
    client_delete,
    client_read_scopes_set,
    end_user_delete,
    organization_delete,
    removal_summary,
)
from mirix_site.common.admin import BoundedCountAdmin, ReadOnlyAdmin
from mirix_site.console.panels import list_url

# --- An end user's page: each app shows what it holds about them -----------------------------

# The newest rows a part of a user's page lists; its link leads to all of them.
USER_PAGE_ROWS = 10


@dataclass(frozen=True)
class UserPagePart:
    """A titled table on an end user's admin page: the newest of their rows of one kind (at
    most ``USER_PAGE_ROWS``), how many there are, and the admin list of them all."""

    title: str
    headers: list[str]
    rows: list[list[Any]]
    total: int
    more_url: str | None = None


_user_page: list[tuple[int, Callable[[EndUser], list[UserPagePart]]]] = []


def user_page_register(order: int, parts: Callable[[EndUser], list[UserPagePart]]) -> None:
    """An app's parts of the user's page (from its admin module), placed by ``order``."""
    _user_page.append((order, parts))


def user_rows_url(model: type[models.Model], end_user: EndUser) -> str:
    """The admin list of a model's rows, filtered to one end user."""
    return list_url(model, end_user__id__exact=end_user.pk)


def change_link(obj: models.Model, text: object = None) -> str:
    """A link to the object's admin page."""
    meta = obj._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, obj if text is None else text)


class ServiceDeletionAdmin(admin.ModelAdmin):
    """Deletes go through ``delete_service`` (the object and everything it holds, in every app,
    in one transaction), one object at a time. The confirmation page lists what would go, kind
    by kind, from a dry run of the same service: not Django's walk of the related rows, which
    would ask for the delete permission on audit records whose admins are read-only."""

    @staticmethod
    def delete_service(obj: Any, *, dry_run: bool) -> dict[str, int]:
        raise NotImplementedError

    def get_deleted_objects(
        self, objs: Iterable[models.Model], request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
        objs = list(objs)
        counts: Counter[str] = Counter()
        if request.POST.get("post") != "yes":  # confirmed: the deletion itself counts
            for obj in objs:
                counts.update(self.delete_service(obj, dry_run=True))
        named = [
            format_html("{}: {}", capfirst(obj._meta.verbose_name), change_link(obj))
            for obj in objs
        ]
        return named, removal_summary(dict(counts)), set(), []

    def delete_model(self, request: HttpRequest, obj: models.Model) -> None:
        removed = self.delete_service(obj, dry_run=False)
        summary = ", ".join(
            f"{count} {name.lower()}" for name, count in removal_summary(removed).items()
        )
        self.message_user(request, f"Deleted {obj}: {summary}.", level=messages.SUCCESS)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for obj in queryset:
            self.delete_model(request, obj)


@admin.register(Organization)
class OrganizationAdmin(ServiceDeletionAdmin):
    list_display = ["name", "id", "created_at"]
    list_filter = ["created_at"]
    search_fields = ["name", "id"]
    readonly_fields = ["id", "created_at"]

    @staticmethod
    def delete_service(obj: Organization, *, dry_run: bool) -> dict[str, int]:
        return organization_delete(organization=obj, dry_run=dry_run)


class ClientForm(forms.ModelForm):
    """A client's read scopes name clients of its own organization only: another one's is a
    form error on the field, not a refusal after the save."""

    class Meta:
        model = Client
        fields = ["name", "organization", "read_scopes"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        organization = (
            self.instance.organization if self.instance.pk else cleaned.get("organization")
        )
        foreign = [
            scope.name
            for scope in cleaned.get("read_scopes") or []
            if organization is not None and scope.organization_id != organization.pk
        ]
        if foreign:
            self.add_error(
                "read_scopes",
                f"Clients of another organization cannot be read: {', '.join(foreign)}.",
            )
        return cleaned


@admin.register(Client)
class ClientAdmin(ServiceDeletionAdmin):
    form = ClientForm
    list_display = ["name", "organization", "id", "created_at"]
    list_filter = ["organization"]
    search_fields = ["name", "id", "organization__name"]
    list_select_related = ["organization"]
    readonly_fields = ["id", "created_at"]
    filter_horizontal = ["read_scopes"]

    def get_readonly_fields(self, request: HttpRequest, obj: Client | None = None) -> list[str]:
        # A client's rows all carry its organization: moving it would split them.
        return [*self.readonly_fields, "organization"] if obj is not None else self.readonly_fields

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        scopes = list(form.cleaned_data.pop("read_scopes", []))
        super().save_related(request, form, formsets, change)
        client_read_scopes_set(client=form.instance, scopes=scopes)

    @staticmethod
    def delete_service(obj: Client, *, dry_run: bool) -> dict[str, int]:
        return client_delete(client=obj, dry_run=dry_run)


class ApiKeyCreateForm(forms.ModelForm):
    class Meta:
        model = ApiKey
        fields = ["client", "name", "read_only", "reveals_secrets"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """The digest is never shown. A new key's plaintext is shown once, in the message after
    saving; there is no way to see it again."""

    list_display = [
        "__str__",
        "name",
        "client",
        "organization",
        "read_only",
        "reveals_secrets",
        "created_at",
        "revoked_at",
    ]
    list_filter = [
        "read_only",
        "reveals_secrets",
        "organization",
        ("revoked_at", admin.EmptyFieldListFilter),
    ]
    search_fields = ["key_id", "name", "client__name", "organization__name"]
    list_select_related = ["client", "organization"]
    raw_id_fields = ["client"]
    actions = ["revoke_selected"]
    _permissions = ("read_only", "reveals_secrets")
    _times = ("created_at", "revoked_at")

    def get_form(self, request: HttpRequest, obj: ApiKey | None = None, **kwargs: Any) -> Any:
        if obj is None:
            kwargs["form"] = ApiKeyCreateForm
        return super().get_form(request, obj, **kwargs)

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> list[str]:
        if obj is None:
            return list(ApiKeyCreateForm.Meta.fields)
        return ["key_id", "name", "client", "organization", *self._permissions, *self._times]

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> list[str]:
        # A key's permissions are fixed when it is issued: a new key, not an edit, changes them.
        if obj is None:
            return []
        return [name for name in self.get_fields(request, obj) if name != "name"]

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            obj.save(update_fields=["name"])
            return
        issued = api_key_create(
            client=obj.client,
            name=obj.name,
            read_only=obj.read_only,
            reveals_secrets=obj.reveals_secrets,
        )
        obj.pk = issued.api_key.pk
        obj.key_id = issued.api_key.key_id
        self.message_user(
            request,
            f"API key created. Copy it now, it will not be shown again: {issued.plaintext}",
            level=messages.WARNING,
        )

    def delete_model(self, request: HttpRequest, obj: ApiKey) -> None:
        api_key_delete(api_key=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        for api_key in queryset:
            api_key_delete(api_key=api_key)

    @admin.action(description="Revoke selected API keys")
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        keys = list(queryset)
        for api_key in keys:
            api_key_revoke(api_key=api_key)
        self.message_user(request, f"Revoked {len(keys)} API key(s).", level=messages.SUCCESS)


@admin.register(EndUser)
class EndUserAdmin(BoundedCountAdmin, ServiceDeletionAdmin):
    """Deleting an end user is the operator's forget: every client's rows about them go."""

    list_display = ["user_id", "name", "organization", "created_by", "created_at"]
    list_filter = ["organization", "created_at"]
    search_fields = ["user_id", "name", "organization__name"]
    list_select_related = ["organization", "created_by"]
    readonly_fields = ["organization", "user_id", "created_by", "created_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # end users come from the API, named by the application

    change_form_template = "admin/accounts/enduser/change_form.html"

    @staticmethod
    def delete_service(obj: EndUser, *, dry_run: bool) -> dict[str, int]:
        return end_user_delete(end_user=obj, dry_run=dry_run)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The user's page: their row, then what every app holds about them, across clients
        (the delete button below is the operator's forget)."""
        end_user = self.get_object(request, unquote(object_id))
        parts: list[UserPagePart] = []
        if end_user is not None:
            for _order, render in sorted(_user_page, key=lambda entry: entry[0]):
                parts.extend(render(end_user))
        context = {**(extra_context or {}), "user_page_parts": parts}
        return super().change_view(request, object_id, form_url, context)


@admin.register(UserImport)
class UserImportAdmin(ReadOnlyAdmin):
    """Each export file imported (``manage.py import_user``): into whom, from where, what it
    wrote. A record: a second import of the same file into the same user and client is refused
    by it."""

    list_display = [
        "export_id",
        "end_user",
        "client",
        "source_organization",
        "source_user_id",
        "exported_at",
        "created_at",
    ]
    list_filter = ["organization", "client", "created_at"]
    search_fields = ["export_id", "end_user__user_id", "source_user_id", "source_organization"]
    list_select_related = ["end_user", "client", "organization"]
    readonly_fields = [
        "organization",
        "client",
        "end_user",
        "export_id",
        "source_organization",
        "source_user_id",
        "exported_at",
        "counts",
        "created_at",
    ]
