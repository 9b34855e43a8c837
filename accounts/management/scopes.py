"""What the operators' commands share: clients, tenants and end users named on the command
line."""

from __future__ import annotations

from django.core.management.base import CommandError
from django.db.models import Q

from accounts.models import Client, EndUser, Organization
from accounts.selectors import end_user_get
from accounts.tenancy import Tenant


def clients_get(client_ids: list[str]) -> list[Client]:
    """The clients with these ids, in order; a ``CommandError`` naming any that does not
    exist."""
    found = Client.objects.in_bulk(client_ids)
    missing = [client_id for client_id in client_ids if client_id not in found]
    if missing:
        raise CommandError(f"No client with id {', '.join(map(repr, missing))}.")
    return [found[client_id] for client_id in client_ids]


def tenant_named(*, organization_id: str, client: str | None) -> Tenant:
    """The organization and its client named by id or by name (None: its only client), as a
    command acts for them; a ``CommandError`` when there is no such organization or client, or
    when the organization has several clients and none was named."""
    organization = Organization.objects.filter(pk=organization_id).first()
    if organization is None:
        raise CommandError(f"No organization with id {organization_id!r}.")
    clients = Client.objects.filter(organization=organization)
    if client is not None:
        clients = clients.filter(Q(pk=client) | Q(name=client))
    found = list(clients.order_by("name", "pk")[:2])
    if client is not None and not found:
        raise CommandError(f"No client {client!r} in organization {organization_id!r}.")
    if len(found) != 1:
        names = ", ".join(sorted(clients.values_list("name", flat=True))) or "none"
        raise CommandError(
            f"Organization {organization_id!r} has clients {names}: name one with --client."
        )
    return Tenant(organization=organization, client=found[0])


def end_user_named(*, tenant: Tenant, user_id: str) -> EndUser:
    """The end user with this id the tenant's client may read, as the API names them; a
    ``CommandError`` when it has none."""
    try:
        return end_user_get(tenant=tenant, user_id=user_id)
    except EndUser.DoesNotExist:
        raise CommandError(
            f"No end user {user_id!r} in organization {tenant.organization.pk!r}."
        ) from None


def end_user_in(*, organization_id: str, user_id: str) -> EndUser:
    """The organization's end user with this id, whichever client wrote them; a
    ``CommandError`` when it has none (or there is no such organization)."""
    try:
        return EndUser.objects.select_related("organization").get(
            organization_id=organization_id, user_id=user_id
        )
    except EndUser.DoesNotExist:
        raise CommandError(
            f"No end user {user_id!r} in organization {organization_id!r}."
        ) from None
