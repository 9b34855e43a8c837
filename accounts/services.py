"""Writes for tenants, clients, API keys and end users."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.keys import key_format, key_generate, secret_digest
from accounts.models import ApiKey, Client, EndUser, Organization, owned_models
from accounts.tenancy import Tenant


@dataclass(frozen=True)
class IssuedKey:
    """A freshly created key with its plaintext, which exists only here and is never stored."""

    api_key: ApiKey
    plaintext: str


@transaction.atomic
def organization_create(*, name: str) -> Organization:
    return Organization.objects.create(name=name)


@transaction.atomic
def organization_delete(*, organization: Organization) -> dict[str, int]:
    """Delete the organization and, by cascade, every row it owns in every app."""
    _, deleted = organization.delete()
    return deleted


@transaction.atomic
def client_create(
    *, organization: Organization, name: str, read_scopes: Iterable[Client] = ()
) -> Client:
    client = Client.objects.create(organization=organization, name=name)
    client_read_scopes_set(client=client, scopes=read_scopes)
    return client


@transaction.atomic
def client_read_scopes_set(*, client: Client, scopes: Iterable[Client]) -> Client:
    scopes = list(scopes)
    foreign = [scope.pk for scope in scopes if scope.organization_id != client.organization_id]
    if foreign:
        raise ValidationError(
            {
                "read_scopes": [
                    f"Clients of another organization cannot be read: {', '.join(foreign)}."
                ]
            }
        )
    client.read_scopes.set([scope for scope in scopes if scope.pk != client.pk])
    return client


@transaction.atomic
def api_key_create(
    *, client: Client, name: str = "", read_only: bool = False, reveals_secrets: bool = False
) -> IssuedKey:
    key_id, secret = key_generate()
    api_key = ApiKey.objects.create(
        organization_id=client.organization_id,
        client=client,
        key_id=key_id,
        secret_digest=secret_digest(secret),
        name=name,
        read_only=read_only,
        reveals_secrets=reveals_secrets,
    )
    return IssuedKey(api_key=api_key, plaintext=key_format(key_id=key_id, secret=secret))


@transaction.atomic
def api_key_revoke(*, api_key: ApiKey) -> ApiKey:
    """Revoke the key; the next request presenting it is refused. Revoking twice is a no-op."""
    if api_key.revoked_at is None:
        api_key.revoked_at = timezone.now()
        api_key.save(update_fields=["revoked_at"])
    return api_key


@transaction.atomic
def api_key_delete(*, api_key: ApiKey) -> None:
    api_key.delete()


@transaction.atomic
def tenant_create(
    *, organization_name: str, client_name: str, key_name: str = "", read_only: bool = False
) -> IssuedKey:
    organization = organization_create(name=organization_name)
    client = client_create(organization=organization, name=client_name)
    return api_key_create(client=client, name=key_name, read_only=read_only)


def end_user_create_or_get(
    *, tenant: Tenant, user_id: str | None, name: str | None
) -> tuple[EndUser, bool]:
    """The organization's end user with this ``user_id``, created if new (``user-<uuid>`` when
    no id is given). Safe under concurrent calls for the same id."""
    user_id = user_id or f"user-{uuid.uuid4()}"
    try:
        return EndUser.objects.get(organization=tenant.organization, user_id=user_id), False
    except EndUser.DoesNotExist:
        pass
    try:
        with transaction.atomic():
            created = EndUser.objects.create(
                organization=tenant.organization,
                user_id=user_id,
                name=name or user_id,
                created_by=tenant.client,
            )
        return created, True
    except IntegrityError:
        # Lost a race with a concurrent create of the same user_id: the row exists now.
        return EndUser.objects.get(organization=tenant.organization, user_id=user_id), False


@transaction.atomic
def end_user_delete(*, end_user: EndUser) -> dict[str, int]:
    """Delete the end user and, by cascade, everything every client stored for them: an
    operator's action (the admin), not a client's (``end_user_delete_own``)."""
    _, deleted = end_user.delete()
    return deleted


@transaction.atomic
def end_user_delete_own(*, tenant: Tenant, end_user: EndUser) -> dict[str, int]:
    """A client forgets an end user: every row its own client holds about them, in every app
    (``Owned`` models), goes; other clients' rows stay. The end user row itself goes once no
    client holds anything about them. Returns the counts of the caller's rows deleted, by
    model label: nothing about other clients' rows, not even whether there are any."""
    # Held until commit: a concurrent write for the user waits, then finds it or not.
    list(EndUser.objects.select_for_update().filter(pk=end_user.pk).values_list("pk"))
    counts: dict[str, int] = {}
    for model in owned_models():
        _, per_model = model.objects.owned_by(tenant, end_user=end_user).delete()
        for label, count in per_model.items():
            counts[label] = counts.get(label, 0) + count
    if not any(model.objects.filter(end_user=end_user).exists() for model in owned_models()):
        end_user.delete()
    return counts
