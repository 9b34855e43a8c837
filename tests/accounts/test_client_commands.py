"""Operators add clients and set read scopes with commands: the printed key works, and reads
follow the scopes from the next request on."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from accounts.models import Client
from tests.factories import TenantFixture, api_client_with, memories_create

pytestmark = pytest.mark.django_db


def _run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def _printed(output: str, label: str) -> str:
    return next(line.split()[-1] for line in output.splitlines() if line.startswith(label))


def _memories_seen(api, user_id: str) -> int:
    body = api.get("/memory/components", {"user_id": user_id}).json()
    return body["counts"]["episodic"]


def test_create_client_with_a_key_that_reads_its_scope(org: TenantFixture) -> None:
    memories_create(org, user_id="sam")
    output = _run(
        "create_client", org.organization.pk, "reporting", "--read-scope", org.client.pk, "--key"
    )
    client = Client.objects.get(pk=_printed(output, "client:"))
    assert client.organization_id == org.organization.pk and client.name == "reporting"
    assert list(client.read_scopes.all()) == [org.client]
    reporting = api_client_with(_printed(output, "api key:"))
    assert _memories_seen(reporting, "sam") == _memories_seen(org.api, "sam") > 0

    assert "reads: its own rows only" in _run("set_read_scopes", client.pk, "--none")
    assert _memories_seen(reporting, "sam") == 0
    assert f"reads: {org.client.pk}" in _run("set_read_scopes", client.pk, org.client.pk)
    assert _memories_seen(reporting, "sam") > 0


def test_a_read_only_key_from_create_client_cannot_write(org: TenantFixture) -> None:
    output = _run("create_client", org.organization.pk, "viewer", "--key", "--read-only")
    viewer = api_client_with(_printed(output, "api key:"))
    response = viewer.post("/users/create_or_get", {"user_id": "x"}, format="json")
    assert response.status_code == 403


def test_client_commands_refuse_what_does_not_exist_or_is_another_organizations(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    with pytest.raises(CommandError, match="No organization"):
        _run("create_client", "org-missing", "x")
    with pytest.raises(CommandError, match="another organization"):
        _run("create_client", org.organization.pk, "x", "--read-scope", other_org.client.pk)
    with pytest.raises(CommandError, match="No client"):
        _run("set_read_scopes", org.client.pk, "client-missing")
    with pytest.raises(CommandError, match="another organization"):
        _run("set_read_scopes", org.client.pk, other_org.client.pk)
    with pytest.raises(CommandError, match="--none"):
        _run("set_read_scopes", org.client.pk)
    with pytest.raises(CommandError, match="--key"):
        _run("create_client", org.organization.pk, "x", "--read-only")
    # Nothing was half-made by the refused commands.
    assert list(Client.objects.filter(name="x")) == []
    assert list(org.client.read_scopes.all()) == []
