"""The caller's tenant: who is asking, resolved from the API key, passed to every selector."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from accounts.models import ApiKey, Client, Organization


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

    @cached_property
    def readable_client_ids(self) -> frozenset[str]:
        """This client and the clients it has read scopes on, within its own organization."""
        scoped = self.client.read_scopes.filter(organization_id=self.organization.pk)
        return frozenset([self.client.pk, *scoped.values_list("pk", flat=True)])

    @classmethod
    def for_api_key(cls, api_key: ApiKey) -> Tenant:
        return cls(organization=api_key.client.organization, client=api_key.client, api_key=api_key)
