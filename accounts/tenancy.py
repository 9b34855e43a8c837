"""The caller's tenant, and the one rule of which tenant-owned rows a caller may read or write.

``Tenant`` is who is asking, resolved from the API key and passed to every selector. ``Scope``
is what a tenant reaches: ``Scope.readable_by`` (the client's own rows and those of the clients
in its read scopes, in its organization) and ``Scope.owned_by`` (its own rows only) are the two
rules; the ORM (``OwnedQuerySet``, through ``Scope.lookups``) and hand-written SQL (the search
engine, through ``Scope.where``) both apply a scope built by them, so the rule is stated here
alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accounts.models import ApiKey, Client, EndUser, Organization


@dataclass(frozen=True)
class Tenant:
    """An organization and one of its clients (and the key that proved it, for API requests).

    DRF stores it as ``request.user``, hence ``is_authenticated``.
    """

    organization: Organization
    client: Client
    api_key: ApiKey | None = None

    is_authenticated = True
    is_anonymous = False

    @property
    def read_only(self) -> bool:
        return self.api_key is not None and self.api_key.read_only

    @property
    def reveals_secrets(self) -> bool:
        """The key has the secrets permission (``ApiKey.reveals_secrets``)."""
        return self.api_key is not None and self.api_key.reveals_secrets

    @property
    def secrets_of(self) -> str | None:
        """The client whose secrets (vault values, sensitive values in turns) this caller may
        see in plain text: its own, with the permission; None: every secret masked. Secrets
        of clients read through a read scope are never shown."""
        return self.client.pk if self.reveals_secrets else None

    @cached_property
    def readable_client_ids(self) -> frozenset[str]:
        """This client and the clients it has read scopes on, within its own organization."""
        scoped = self.client.read_scopes.filter(organization_id=self.organization.pk)
        return frozenset([self.client.pk, *scoped.values_list("pk", flat=True)])

    def owner_ids(self, end_user: EndUser) -> dict[str, Any]:
        """The owner of a row this tenant writes for ``end_user``, as the row's keyword
        arguments."""
        return {
            "organization_id": self.organization.pk,
            "client_id": self.client.pk,
            "end_user_id": end_user.pk,
        }

    def owns(self, row: Any) -> bool:
        """Whether the tenant may change a tenant-owned row it can read: rows its own client
        wrote (``Scope.owned_by`` in queries); rows read through a read scope are read-only."""
        return row.client_id == self.client.pk

    @classmethod
    def for_api_key(cls, api_key: ApiKey) -> Tenant:
        return cls(organization=api_key.client.organization, client=api_key.client, api_key=api_key)


@dataclass(frozen=True)
class Scope:
    """Tenant-owned rows (those with organization, client and end user columns) of one
    organization, written by some of its clients, of one end user or (``end_user_id`` None) of
    every user. An end user belongs to one organization, so a scope with one leaves the
    organization out of its condition: a user's own indexes then serve it alone."""

    organization_id: str
    client_ids: tuple[str, ...]
    end_user_id: int | None = None

    @classmethod
    def readable_by(cls, tenant: Tenant, *, end_user: EndUser | None = None) -> Scope:
        """What the tenant may read: rows its client wrote and rows the clients in its read
        scopes wrote, in its organization."""
        return cls._of(tenant, tenant.readable_client_ids, end_user)

    @classmethod
    def owned_by(cls, tenant: Tenant, *, end_user: EndUser | None = None) -> Scope:
        """What the tenant may change: rows its own client wrote."""
        return cls._of(tenant, [tenant.client.pk], end_user)

    @classmethod
    def _of(cls, tenant: Tenant, client_ids: Iterable[str], end_user: EndUser | None) -> Scope:
        if end_user is not None and end_user.organization_id != tenant.organization.pk:
            # Callers resolve end users through the tenant; another organization's is a bug.
            raise ValueError(f"end user {end_user.pk} is not of {tenant.organization.pk}")
        return cls(
            organization_id=tenant.organization.pk,
            client_ids=tuple(sorted(client_ids)),
            end_user_id=end_user.pk if end_user is not None else None,
        )

    def lookups(self) -> dict[str, Any]:
        """The scope as ORM lookups (``queryset.filter(**scope.lookups())``)."""
        owner: dict[str, Any] = (
            {"end_user_id": self.end_user_id}
            if self.end_user_id is not None
            else {"organization_id": self.organization_id}
        )
        return owner | {"client_id__in": self.client_ids}

    def where(self, alias: str = "") -> tuple[str, dict[str, object]]:
        """The same condition in SQL, for any table with the owner columns (``alias``: a
        prefix such as "m."), with its parameters."""
        params: dict[str, object]
        if self.end_user_id is not None:
            owner = f"{alias}end_user_id = %(end_user_id)s"
            params = {"end_user_id": self.end_user_id}
        else:
            owner = f"{alias}organization_id = %(organization_id)s"
            params = {"organization_id": self.organization_id}
        clients = f"{alias}client_id = ANY(%(client_ids)s::text[])"
        return f"{owner} AND {clients}", params | {"client_ids": list(self.client_ids)}
