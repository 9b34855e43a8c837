from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from accounts.models import ApiKey
from tests.factories import TenantFixture, api_client_with


@pytest.fixture
def operator(client, db):
    user = get_user_model().objects.create_superuser("operator", "op@example.com", "pw")
    client.force_login(user)
    return client


def test_admin_creates_a_key_and_shows_it_once(operator, org: TenantFixture) -> None:
    response = operator.post(
        "/admin/accounts/apikey/add/",
        {"client": org.client.pk, "name": "from admin", "read_only": ""},
        follow=True,
    )
    assert response.status_code == 200
    page = response.content.decode()
    match = re.search(r"mxk_[0-9a-f]{16}_[A-Za-z0-9]{40}", page)
    assert match, "the new key's plaintext is shown after saving"
    key = match.group(0)
    assert api_client_with(key).get("/users").status_code == 200
    api_key = ApiKey.objects.get(name="from admin")
    assert api_key.organization == org.organization

    detail = operator.get(f"/admin/accounts/apikey/{api_key.pk}/change/").content.decode()
    assert key not in detail
    assert api_key.secret_digest not in detail
    assert key not in operator.get("/admin/accounts/apikey/").content.decode()


def test_admin_revoke_action(operator, org: TenantFixture) -> None:
    response = operator.post(
        "/admin/accounts/apikey/",
        {"action": "revoke_selected", "_selected_action": [org.api_key.pk]},
        follow=True,
    )
    assert response.status_code == 200
    assert "Revoked 1 API key" in response.content.decode()
    assert org.api.get("/users").status_code == 401


@pytest.mark.parametrize(
    "path",
    [
        "/admin/accounts/organization/",
        "/admin/accounts/client/",
        "/admin/accounts/apikey/",
        "/admin/accounts/enduser/",
        "/admin/memory/metaagent/",
        "/admin/accounts/apikey/add/",
    ],
)
def test_admin_pages_render(operator, org: TenantFixture, path: str) -> None:
    org.api.post("/users/create_or_get", {"user_id": "u"})
    org.api.post("/agents/meta/initialize", {"provider": "openai"}, format="json")
    assert operator.get(path).status_code == 200
