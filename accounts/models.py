"""Tenancy: organizations, their client applications, API keys and the end users they serve."""

from __future__ import annotations

import uuid
from typing import Any

from django.apps import apps
from django.db import models

from accounts.tenancy import Scope, Tenant


def _prefixed_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


def new_organization_id() -> str:
    return _prefixed_id("org")


def new_client_id() -> str:
    return _prefixed_id("client")


class Organization(models.Model):
    """A tenant. Everything the server stores belongs to exactly one organization."""

    id = models.CharField(
        primary_key=True, max_length=64, default=new_organization_id, editable=False
    )
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name


class Client(models.Model):
    """An application inside an organization. It writes under its own name and reads what it
    wrote plus what the clients in ``read_scopes`` (same organization only) wrote."""

    id = models.CharField(primary_key=True, max_length=64, default=new_client_id, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="clients")
    name = models.CharField(max_length=200)
    read_scopes = models.ManyToManyField(
        "self",
        symmetrical=False,
        blank=True,
        related_name="readable_by",
        help_text="Other clients of the same organization whose rows this client may read.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["organization_id", "name", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "name"], name="client_name_unique_per_org"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class ApiKey(models.Model):
    """One API key of a client: ``mxk_<key_id>_<secret>``. Only the key id and an HMAC-SHA256 of
    the secret (keyed with the server's pepper) are stored; the plaintext is shown once."""

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="api_keys"
    )
    client = models.ForeignKey(Client, on_delete=models.CASCADE, related_name="api_keys")
    key_id = models.CharField(max_length=32, unique=True, editable=False)
    secret_digest = models.CharField(max_length=64, editable=False)
    name = models.CharField(max_length=200, blank=True)
    read_only = models.BooleanField(default=False)
    # Knowledge-vault values its client wrote are shown in plain text when asked for
    # (include_secrets=true); without it they are masked for every key.
    reveals_secrets = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"mxk_{self.key_id}_…"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class EndUser(models.Model):
    """A person an application serves, named by the caller's ``user_id``. The same ``user_id`` in
    two organizations names two different people."""

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="end_users"
    )
    user_id = models.CharField(max_length=255)
    name = models.CharField(max_length=255, blank=True)
    created_by = models.ForeignKey(
        Client, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "end user"
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "user_id"], name="end_user_unique_per_org"
            ),
        ]
        indexes = [
            # The user list's keyset pages: newest first within an organization.
            models.Index(fields=["organization", "-created_at", "-id"], name="end_user_newest"),
        ]

    def __str__(self) -> str:
        return self.user_id


class EndUserClient(models.Model):
    """A client that holds something about an end user it did not create: it wrote about them,
    or asked for them by name. A client's user list shows the users that it, or a client it
    reads, created or holds; not every user of its organization."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    end_user = models.ForeignKey(EndUser, on_delete=models.CASCADE, related_name="client_links")
    client = models.ForeignKey(Client, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["end_user", "client"], name="end_user_client_unique")
        ]

    def __str__(self) -> str:
        return f"{self.client_id} holds {self.end_user_id}"


class OwnedQuerySet(models.QuerySet):
    """Rows of an ``Owned`` model, narrowed by the tenancy rule (``accounts.tenancy.Scope``)."""

    def readable_by(self, tenant: Tenant, *, end_user: EndUser | None = None) -> OwnedQuerySet:
        """The rows the tenant may read (of one end user, when given)."""
        return self.in_scope(Scope.readable_by(tenant, end_user=end_user))

    def owned_by(self, tenant: Tenant, *, end_user: EndUser | None = None) -> OwnedQuerySet:
        """The rows the tenant's own client wrote (of one end user, when given)."""
        return self.in_scope(Scope.owned_by(tenant, end_user=end_user))

    def in_scope(self, scope: Scope) -> OwnedQuerySet:
        return self.filter(**scope.lookups())


class Owned(models.Model):
    """A row of one end user, written by one client, in one organization: what the tenancy
    rule reads (``objects.readable_by(tenant)``) and what deleting any of the three removes."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    client = models.ForeignKey(Client, on_delete=models.CASCADE, related_name="+")
    end_user = models.ForeignKey(EndUser, on_delete=models.CASCADE, related_name="+")

    objects = OwnedQuerySet.as_manager()

    class Meta:
        abstract = True

    @property
    def owner_ids(self) -> dict[str, Any]:
        """Its owner, as the keyword arguments of another row of the same owner."""
        return {
            "organization_id": self.organization_id,
            "client_id": self.client_id,
            "end_user_id": self.end_user_id,
        }


class OwnedIndexedByModel(Owned):
    """An ``Owned`` row whose model declares every index on its owner: the foreign keys make
    none of their own (a key to a text primary key brings a ``varchar_pattern_ops`` copy no
    query reads). For tables written by the thousand, where each index is paid on every row."""

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    client = models.ForeignKey(Client, on_delete=models.CASCADE, related_name="+", db_index=False)
    end_user = models.ForeignKey(
        EndUser, on_delete=models.CASCADE, related_name="+", db_index=False
    )

    class Meta:
        abstract = True


class UserImport(Owned):
    """An export file imported into this end user, for this client (``manage.py import_user``):
    the file's export id, where it came from and what it wrote. Importing the same file into
    the same user and client again is refused; it goes with the user, so a forgotten user can
    be imported again."""

    export_id = models.CharField(max_length=64)
    source_organization = models.CharField(max_length=64)
    source_user_id = models.CharField(max_length=255)
    exported_at = models.DateTimeField()
    counts = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "user import"
        constraints = [
            models.UniqueConstraint(
                fields=["end_user", "client", "export_id"], name="user_import_once"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.source_user_id} of {self.source_organization} ({self.export_id})"


def owned_models() -> list[type[Owned]]:
    """Every installed concrete ``Owned`` model, of every app."""
    return [model for model in apps.get_models() if issubclass(model, Owned)]


def tenant_models() -> list[type[models.Model]]:
    """Every installed model whose rows belong to one organization (it has an ``organization``
    key to it), and Organization itself: where a tenant's rows are."""
    found: list[type[models.Model]] = [Organization]
    for model in apps.get_models():
        field = next((f for f in model._meta.concrete_fields if f.name == "organization"), None)
        if field is not None and field.related_model is Organization:
            found.append(model)
    return found
