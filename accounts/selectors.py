"""Reads for tenants, API keys and end users. Every tenant-scoped read takes the tenant first."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

from accounts.keys import digests_match, key_parse, secret_digest
from accounts.models import ApiKey, Client, EndUser, EndUserClient, Organization
from accounts.portability import END, FORMAT, HEADER, VERSION, line_encode, scope_records
from accounts.tenancy import Scope, Tenant
from mirix_site.common.rows import instances_build, model_columns

# Compared against when the key id is unknown, so that an unknown id and a wrong secret take
# the same time and cannot be told apart by a caller.
_UNKNOWN_KEY_DIGEST = "0" * 64


# The models of a key's record, in the order api_key_hydrate takes their values.
API_KEY_RECORD = (ApiKey, Client, Organization)


def api_key_hydrate(*, values: Sequence[Any], from_cursor: bool) -> ApiKey:
    """The key with its client and its organization attached, from the values of the three
    models of ``API_KEY_RECORD`` side by side (the key lookup's row, or the key cache's
    record): what ``select_related("client__organization")`` would load, plus
    ``api_key.organization``, the same row, so that nothing downstream queries for it."""
    api_key, client, organization = instances_build(
        models=API_KEY_RECORD, values=values, from_cursor=from_cursor
    )
    client.organization = organization
    api_key.client = client
    api_key.organization = organization
    return api_key


# Every request runs this lookup. Written as SQL because compiling the equivalent ORM query
# (two select_related joins) costs about a millisecond of CPU, several times the query itself;
# bench/auth.py measures the difference.
_KEY_COLUMNS = [
    *model_columns(model=ApiKey, alias="k"),
    *model_columns(model=Client, alias="c"),
    *model_columns(model=Organization, alias="o"),
]
# Identifiers come from model metadata; the key id is the only value and is bound, not formatted.
_KEY_LOOKUP_SQL = (
    f"SELECT {', '.join(_KEY_COLUMNS)}"  # noqa: S608
    f" FROM {ApiKey._meta.db_table} k"
    f" JOIN {Client._meta.db_table} c ON c.id = k.client_id"
    f" JOIN {Organization._meta.db_table} o ON o.id = c.organization_id"
    " WHERE k.key_id = %s"
)


def _api_key_load(key_id: str) -> ApiKey | None:
    with connection.cursor() as cursor:
        cursor.execute(_KEY_LOOKUP_SQL, [key_id])
        row = cursor.fetchone()
    if row is None:
        return None
    return api_key_hydrate(values=row, from_cursor=True)


def api_key_authenticate(*, presented: str, cached: ApiKey | None = None) -> ApiKey | None:
    """The active key that ``presented`` proves, or None for any malformed, unknown, wrong,
    revoked or deleted key. ``cached`` is the key's record from the Redis cache, when the
    caller has one (see accounts.keycache); otherwise one indexed query."""
    parsed = key_parse(presented)
    if parsed is None:
        return None
    if cached is None or cached.key_id != parsed.key_id:
        cached = _api_key_load(parsed.key_id)
    stored_digest = cached.secret_digest if cached is not None else _UNKNOWN_KEY_DIGEST
    if not digests_match(secret_digest(parsed.secret), stored_digest) or cached is None:
        return None
    if not cached.is_active:
        return None
    return cached


def api_key_find(*, reference: str) -> ApiKey:
    """An API key by its key id or by its full plaintext (operators paste either)."""
    parsed = key_parse(reference)
    key_id = parsed.key_id if parsed is not None else reference
    api_key = ApiKey.objects.select_related("client__organization").get(key_id=key_id)
    if parsed is not None and api_key.secret_digest != secret_digest(parsed.secret):
        raise ApiKey.DoesNotExist(reference)
    return api_key


def end_user_list(*, tenant: Tenant) -> QuerySet[EndUser]:
    return EndUser.objects.filter(organization_id=tenant.organization.pk)


class EndUserRow(NamedTuple):
    """An end user as the list shows it."""

    id: int
    user_id: str
    name: str
    organization_id: str
    created_at: datetime


_SCOPES = Client.read_scopes.through._meta.db_table
# The clients the caller reads (its own, and its read scopes within its organization), as the
# tenancy rule says (``Tenant.readable_client_ids``), inside the page's one query.
_READABLE_SQL = (
    "(SELECT %s::text UNION ALL SELECT s.to_client_id FROM "  # noqa: S608
    f"{_SCOPES} AS s JOIN {Client._meta.db_table} AS c ON c.id = s.to_client_id"
    " WHERE s.from_client_id = %s AND c.organization_id = %s)"
)
_END_USER_PAGE_SQL = (
    "SELECT id, user_id, name, organization_id, created_at"  # noqa: S608
    f" FROM {EndUser._meta.db_table} AS u WHERE organization_id = %s"
    f" AND (created_by_id IN {_READABLE_SQL} OR EXISTS ("
    f"SELECT 1 FROM {EndUserClient._meta.db_table} AS l"
    f" WHERE l.end_user_id = u.id AND l.client_id IN {_READABLE_SQL}))"
    " {after} ORDER BY created_at DESC, id DESC LIMIT %s"
)


def end_users_page(*, tenant: Tenant, after: list[Any] | None, count: int) -> list[EndUserRow]:
    """The end users that the tenant's client, or a client it reads, created or holds
    (``EndUserClient``), newest first, ``count`` of them after the (created_at, id) values
    ``after``: not the users only other clients know. SQL for the reason the key lookup above
    is: building this query through the ORM took 0.9 ms of CPU per page, running it 0.24 ms
    (the list endpoint is the benchmark of an authenticated read, bench/auth.py)."""
    readable = [tenant.client.pk, tenant.client.pk, tenant.organization.pk]
    params: list[Any] = [tenant.organization.pk, *readable, *readable]
    condition = ""
    if after is not None:
        condition = "AND (created_at, id) < (%s, %s)"
        params += after
    with connection.cursor() as cursor:
        cursor.execute(_END_USER_PAGE_SQL.format(after=condition), [*params, count])
        return [EndUserRow(*row) for row in cursor.fetchall()]


def end_user_get(*, tenant: Tenant, user_id: str) -> EndUser:
    """The organization's end user; raises ``EndUser.DoesNotExist`` (a 404) for any other."""
    return end_user_list(tenant=tenant).get(user_id=user_id)


def end_user_export(
    *,
    organization: Organization,
    end_user: EndUser,
    client_ids: Sequence[str],
    secrets: bool = True,
) -> Iterator[str]:
    """Everything the clients ``client_ids`` hold about the end user, as the lines of an
    export file (``accounts.portability``; no newlines): the header, a line per row of every
    portable kind, then the counts. Read as it is written, a batch of rows at a time.
    Without ``secrets``, sensitive values in the turns are masked as the API masks them for
    a key that may not see them (the vault's values are encrypted either way)."""
    scope = Scope(
        organization_id=organization.pk,
        client_ids=tuple(sorted(client_ids)),
        end_user_id=end_user.pk,
    )
    yield line_encode(
        {
            "kind": HEADER,
            "format": FORMAT,
            "version": VERSION,
            "export_id": str(uuid.uuid4()),
            "organization": organization.pk,
            "user_id": end_user.user_id,
            "name": end_user.name,
            "clients": list(scope.client_ids),
            "exported_at": timezone.now(),
            "secrets_masked": not secrets,
        }
    )
    counts: Counter[str] = Counter()
    for kind, record in scope_records(scope, secrets=secrets):
        counts[kind.name] += 1
        yield line_encode(record)
    yield line_encode({"kind": END, "counts": dict(counts)})
