"""Reads for tenants, API keys and end users. Every tenant-scoped read takes the tenant first."""

from __future__ import annotations

from django.db.models import QuerySet

from accounts.keys import key_parse, secret_digest, secret_matches
from accounts.models import ApiKey, EndUser
from accounts.tenancy import Tenant

# Compared against when the key id is unknown, so that an unknown id and a wrong secret take
# the same time and cannot be told apart by a caller.
_UNKNOWN_KEY_DIGEST = "0" * 64


def api_key_authenticate(*, presented: str) -> ApiKey | None:
    """The active key that ``presented`` proves, or None for any malformed, unknown, wrong,
    revoked or deleted key. One indexed query; nothing is cached, so a revocation or deletion
    takes effect on the very next request."""
    parsed = key_parse(presented)
    if parsed is None:
        return None
    api_key = (
        ApiKey.objects.select_related("client__organization").filter(key_id=parsed.key_id).first()
    )
    digest = api_key.secret_digest if api_key is not None else _UNKNOWN_KEY_DIGEST
    if not secret_matches(secret=parsed.secret, digest=digest) or api_key is None:
        return None
    if not api_key.is_active:
        return None
    return api_key


def api_key_find(*, reference: str) -> ApiKey:
    """An API key by its key id or by its full plaintext (operators paste either)."""
    parsed = key_parse(reference)
    key_id = parsed.key_id if parsed is not None else reference
    api_key = ApiKey.objects.select_related("client__organization").get(key_id=key_id)
    if parsed is not None and api_key.secret_digest != secret_digest(parsed.secret):
        raise ApiKey.DoesNotExist(reference)
    return api_key


def end_user_list(*, tenant: Tenant) -> QuerySet[EndUser]:
    return EndUser.objects.filter(organization=tenant.organization)


def end_user_get(*, tenant: Tenant, user_id: str) -> EndUser:
    """The organization's end user; raises ``EndUser.DoesNotExist`` (a 404) for any other."""
    return end_user_list(tenant=tenant).get(user_id=user_id)
