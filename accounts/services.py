"""Writes for tenants, clients, API keys and end users."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from accounts.keys import key_format, key_generate, secret_digest
from accounts.models import ApiKey, Client, EndUser, EndUserClient, Organization, owned_models
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


# Writers that add rows for an end user hold the row with FOR KEY SHARE until they commit, and
# deletions take FOR UPDATE before deleting anything: the two conflict, nothing else does. So
# a deletion waits for a write in flight and then deletes its rows too, and a write that comes
# second waits for the deletion and then finds the user gone. Without it the write's rows
# would reference a deleted user, and one of the two transactions fails at commit.
_END_USERS_HOLD_SQL = "SELECT id FROM accounts_enduser WHERE id = ANY(%s) FOR KEY SHARE"


def end_users_hold(*, end_user_ids: Iterable[int]) -> set[int]:
    """Hold the end users against deletion until the transaction ends; returns the ids that
    still exist (a deletion that was in flight has finished by then)."""
    with connection.cursor() as cursor:
        cursor.execute(_END_USERS_HOLD_SQL, [sorted(set(end_user_ids))])
        return {row[0] for row in cursor.fetchall()}


def _end_user_held(*, tenant: Tenant, user_id: str) -> EndUser | None:
    held = list(
        EndUser.objects.raw(
            "SELECT * FROM accounts_enduser WHERE organization_id = %s AND user_id = %s"
            " FOR KEY SHARE",
            [tenant.organization.pk, user_id],
        )
    )
    return held[0] if held else None


def end_user_create_or_get(
    *, tenant: Tenant, user_id: str | None, name: str | None
) -> tuple[EndUser, bool]:
    """The organization's end user with this ``user_id``, created if new (``user-<uuid>`` when
    no id is given), held against deletion until the caller's transaction ends (see
    ``end_users_hold``). Safe under concurrent calls for the same id, and under a concurrent
    deletion of it (the user is created again)."""
    user_id = user_id or f"user-{uuid.uuid4()}"
    for _attempt in range(3):
        existing = _end_user_held(tenant=tenant, user_id=user_id)
        if existing is not None:
            if existing.created_by_id != tenant.client.pk:
                # Another client's user: this one holds them too from now on (its list).
                EndUserClient.objects.bulk_create(
                    [
                        EndUserClient(
                            organization=tenant.organization,
                            end_user=existing,
                            client=tenant.client,
                        )
                    ],
                    ignore_conflicts=True,
                )
            return existing, False
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
            # Lost a race with a concurrent create of the same user_id: the row exists now
            # (unless a deletion took it meanwhile: then try again).
            continue
    raise RuntimeError(f"end user {user_id!r} was created and deleted under us three times")


def _end_user_lock(end_user: EndUser) -> None:
    """Before a deletion touches anything: wait for the writes in flight (``end_users_hold``)
    and keep new ones out until commit."""
    list(EndUser.objects.select_for_update().filter(pk=end_user.pk).values_list("pk"))


@transaction.atomic
def end_user_delete(*, end_user: EndUser) -> dict[str, int]:
    """Delete the end user and, by cascade, everything every client stored for them: an
    operator's action (the admin), not a client's (``end_user_delete_own``)."""
    _end_user_lock(end_user)
    _, deleted = end_user.delete()
    return deleted


@transaction.atomic
def end_user_delete_own(*, tenant: Tenant, end_user: EndUser) -> dict[str, int]:
    """A client forgets an end user: every row its own client holds about them, in every app
    (``Owned`` models), goes; other clients' rows stay. The end user row itself goes once no
    client holds anything about them. Returns the counts of the caller's rows deleted, by
    model label: nothing about other clients' rows, not even whether there are any."""
    _end_user_lock(end_user)
    counts: dict[str, int] = {}
    # The client no longer holds the user: off its list, whoever else still does.
    EndUserClient.objects.filter(end_user=end_user, client=tenant.client).delete()
    if end_user.created_by_id == tenant.client.pk:
        end_user.created_by = None
        end_user.save(update_fields=["created_by"])
    for model in owned_models():
        _, per_model = model.objects.owned_by(tenant, end_user=end_user).delete()
        for label, count in per_model.items():
            counts[label] = counts.get(label, 0) + count
    if not any(model.objects.filter(end_user=end_user).exists() for model in owned_models()):
        end_user.delete()
    return counts
