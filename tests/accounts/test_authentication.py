from __future__ import annotations

import secrets
from dataclasses import replace
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.http import HttpResponse
from django.test import Client as DjangoClient
from django.urls import get_resolver

from accounts.models import Client, EndUser, owned_models
from accounts.services import (
    api_key_create,
    api_key_delete,
    api_key_revoke,
    client_read_scopes_set,
)
from tests.endpoints import (
    ENDPOINTS,
    UNAUTHENTICATED_ROUTES,
    Endpoint,
    body,
    call,
    owned_ids,
)
from tests.factories import TenantFixture, api_client_with

UNAUTHENTICATED = {"detail": "Missing or invalid API key.", "code": "not_authenticated"}


def test_every_endpoint_is_listed() -> None:
    def routes(resolver, prefix=""):
        for pattern in resolver.url_patterns:
            if hasattr(pattern, "url_patterns"):
                yield from routes(pattern, prefix + str(pattern.pattern))
            else:
                yield prefix + str(pattern.pattern)

    api_routes = {
        route for route in routes(get_resolver()) if not route.startswith("admin/")
    } - UNAUTHENTICATED_ROUTES
    assert api_routes == {endpoint.route for endpoint in ENDPOINTS}


# Keys that never authenticate anyone: none, empty, malformed, well formed with an unknown id,
# a secret of the wrong shape, a scheme word alone.
MALFORMED_KEYS = {
    "none": None,
    "empty": "",
    "malformed": "not-a-key",
    "unknown": "mxk_0123456789abcdef_" + "A" * 40,
    "bad-shape": "mxk_0123456789abcdef_short",
    "junk": "Bearer",
}


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda e: f"{e.method} {e.path}")
class TestEveryEndpointRefusesBadKeys:
    """Each endpoint, on objects that exist and are the key's client's own, with every kind of
    bad key in turn. One test an endpoint, since building the objects (``owned_ids``: real
    adds, extraction, a learning run) is most of its time; each refusal says which key."""

    def test_bad_keys_are_refused(self, endpoint: Endpoint, org: TenantFixture) -> None:
        ids = owned_ids(org)
        for name, key in MALFORMED_KEYS.items():
            response = call(api_client_with(key), endpoint, **ids)
            assert (name, response.status_code, response.json()) == (name, 401, UNAUTHENTICATED)
            assert response["WWW-Authenticate"], name

        wrong = org.key[: -len("x")] + ("x" if not org.key.endswith("x") else "y")
        response = call(api_client_with(wrong), endpoint, **ids)
        assert ("wrong secret", response.status_code, response.json()) == (
            "wrong secret",
            401,
            UNAUTHENTICATED,
        )

        # Revoked: refused on the request after, though it had just worked.
        api_key, key = org.new_key()
        api = api_client_with(key)
        assert call(api, Endpoint("GET", "/users")).status_code == 200
        api_key_revoke(api_key=api_key)
        response = call(api, endpoint, **ids)
        assert ("revoked", response.status_code, response.json()) == (
            "revoked",
            401,
            UNAUTHENTICATED,
        )

        api_key, key = org.new_key()
        api_key_delete(api_key=api_key)
        response = call(api_client_with(key), endpoint, **ids)
        assert ("deleted", response.status_code, response.json()) == (
            "deleted",
            401,
            UNAUTHENTICATED,
        )

    def test_read_only_key(self, endpoint: Endpoint, org: TenantFixture) -> None:
        ids = owned_ids(org)
        _, key = org.new_key(read_only=True)
        response = call(api_client_with(key), endpoint, **ids)
        if endpoint.writes:
            assert response.status_code == 403
            assert response.json() == {
                "detail": "This API key is read-only.",
                "code": "read_only_key",
            }
        else:
            assert response.status_code == 200

    def test_other_tenants_object_is_not_found(
        self, endpoint: Endpoint, org: TenantFixture, other_org: TenantFixture
    ) -> None:
        if "{" not in endpoint.path:
            pytest.skip("no object id in this path")
        theirs = owned_ids(other_org)
        missing = {name: f"{value}-missing" for name, value in theirs.items()}
        response_theirs = call(org.api, endpoint, **theirs)
        response_missing = call(org.api, endpoint, **missing)
        assert response_theirs.status_code == 404
        assert (
            response_theirs.json()
            == response_missing.json()
            == {
                "detail": "Not found.",
                "code": "not_found",
            }
        )


def test_bearer_header_is_accepted(org: TenantFixture) -> None:
    api = api_client_with(None)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {org.key}")
    assert api.get("/users").status_code == 200


def test_other_authorization_scheme_is_refused(org: TenantFixture) -> None:
    api = api_client_with(None)
    api.credentials(HTTP_AUTHORIZATION=f"Basic {org.key}")
    response = api.get("/users")
    assert response.status_code == 401
    assert response.json() == UNAUTHENTICATED


def test_revocation_does_not_touch_other_keys(org: TenantFixture) -> None:
    api_key, _ = org.new_key()
    api_key_revoke(api_key=api_key)
    assert org.api.get("/users").status_code == 200


def test_rate_limit_answers_429_with_retry_after(org: TenantFixture, settings) -> None:
    # A day-long window, so the test cannot straddle a window boundary (a minute could).
    settings.API_RATE_LIMIT = "3/d"
    statuses = [org.api.get("/users").status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    response = org.api.get("/users")
    assert response.status_code == 429
    assert response.json()["code"] == "throttled"
    assert 1 <= int(response["Retry-After"]) <= 86400
    # The limit is per key: another key of the same client is not affected.
    _, key = org.new_key()
    assert api_client_with(key).get("/users").status_code == 200


def test_wrong_secrets_do_not_use_up_a_keys_rate_limit(org: TenantFixture, settings) -> None:
    settings.API_RATE_LIMIT = "3/d"
    key_id = org.api_key.key_id
    attacker = api_client_with(f"mxk_{key_id}_" + "B" * 40)
    assert [attacker.get("/users").status_code for _ in range(5)] == [401] * 5
    assert org.api.get("/users").status_code == 200


def test_a_cached_key_costs_no_query(org: TenantFixture, django_assert_num_queries) -> None:
    org.api.get("/users")  # caches the key's record in Redis
    with django_assert_num_queries(1):  # the page of users, nothing for the key
        assert org.api.get("/users").status_code == 200


def test_without_redis_keys_are_checked_in_the_database(org: TenantFixture, settings) -> None:
    from mirix_site.common.redis import redis_client

    api_key, key = org.new_key()
    api = api_client_with(key)
    assert api.get("/users").status_code == 200  # cached now
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    redis_client.cache_clear()
    try:
        assert api.get("/users").status_code == 200
        api_key_revoke(api_key=api_key)
        assert api.get("/users").status_code == 401
    finally:
        redis_client.cache_clear()


def _address() -> str:
    """An address of the test's own: the suite's other refusals come from 127.0.0.1."""
    return f"2001:db8::{secrets.randbits(16):x}:{secrets.randbits(16):x}"


def test_failed_authentications_are_limited_per_address(org: TenantFixture, settings) -> None:
    settings.AUTH_FAILURE_RATE_LIMIT = "3/d"  # a day: the test cannot straddle a window
    address = _address()
    no_key = api_client_with(None)
    bad_key = api_client_with(f"mxk_{org.api_key.key_id}_" + "B" * 40)
    statuses = [
        no_key.get("/users", REMOTE_ADDR=address).status_code,
        bad_key.get("/users", REMOTE_ADDR=address).status_code,
        api_client_with("garbage").get("/users", REMOTE_ADDR=address).status_code,
        bad_key.get("/users", REMOTE_ADDR=address).status_code,
    ]
    assert statuses == [401, 401, 401, 429]
    refused = no_key.get("/users", REMOTE_ADDR=address)
    assert refused.status_code == 429
    assert refused.json()["code"] == "throttled"
    assert 1 <= int(refused["Retry-After"]) <= 86400
    # Past the limit no key is checked from that address, a valid one included: the answer
    # cannot tell a lucky guess from a miss.
    assert org.api.get("/users", REMOTE_ADDR=address).status_code == 429
    # Other addresses are not affected, and successes are never counted.
    other = _address()
    for _ in range(5):
        assert org.api.get("/users", REMOTE_ADDR=other).status_code == 200
    assert bad_key.get("/users", REMOTE_ADDR=other).status_code == 401


def test_cors_preflights_are_not_failed_authentications(org: TenantFixture, settings) -> None:
    settings.AUTH_FAILURE_RATE_LIMIT = "2/d"
    address = _address()
    browser = api_client_with(None)
    for _ in range(5):
        preflight = browser.options(
            "/users",
            REMOTE_ADDR=address,
            HTTP_ORIGIN="https://app.example.com",
            HTTP_ACCESS_CONTROL_REQUEST_METHOD="GET",
        )
        assert preflight.status_code == 401
    assert org.api.get("/users", REMOTE_ADDR=address).status_code == 200


@pytest.mark.parametrize("padding", ["\u00a0", "\u2003", "\n"])
def test_a_key_with_anything_but_http_whitespace_around_it_is_refused(
    org: TenantFixture, padding: str
) -> None:
    assert api_client_with(f" {org.key}\t").get("/users").status_code == 200
    response = api_client_with(org.key + padding).get("/users")
    assert (response.status_code, response.json()) == (401, UNAUTHENTICATED)


def test_admin_logins_are_limited_per_address(settings, db) -> None:
    settings.ADMIN_LOGIN_FAILURE_RATE_LIMIT = "2/d"
    get_user_model().objects.create_superuser("operator", "op@example.com", "right-password")
    address = _address()
    browser = DjangoClient(REMOTE_ADDR=address)

    def login(password: str) -> HttpResponse:
        return browser.post(
            "/admin/login/?next=/admin/", {"username": "operator", "password": password}
        )

    assert login("wrong").status_code == 200  # the form again, with its error
    assert login("wrong").status_code == 200
    refused = login("right-password")  # refused unchecked, like a guess
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 86400
    assert "_auth_user_id" not in browser.session
    assert browser.get("/admin/login/").status_code == 200  # the form itself still shows

    elsewhere = DjangoClient(REMOTE_ADDR=_address())
    response = elsewhere.post(
        "/admin/login/?next=/admin/", {"username": "operator", "password": "right-password"}
    )
    assert response.status_code == 302 and response["Location"] == "/admin/"


# What the first client's objects hold (tests.factories.memories_create): a second client may
# learn none of it unless it has a read scope, and never the e-mail address (a vault value).
FIRST_CLIENTS_TEXT = ("sam@example.com", "example.com/draft", "Sam likes tea", "Brew tea")


def _rows_of(client: Client) -> dict[str, list[tuple[Any, ...]]]:
    """Every row the client holds, in every tenant-owned model, field by field."""
    return {
        model._meta.label: sorted(
            model.objects.filter(client=client).values_list(), key=lambda row: row[0]
        )
        for model in owned_models()
    }


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda e: f"{e.method} {e.path}")
def test_a_second_client_cannot_change_or_unmask_the_firsts_objects(
    endpoint: Endpoint, org: TenantFixture
) -> None:
    """Two clients of one organization, the second with a key that may reveal secrets: on any
    route, given the first's ids, it changes and deletes nothing of the first's, sees none of
    its secrets, and without a read scope none of its content. Without a read scope first, then
    with one, on the same objects (building them is most of the test's time): what the first
    round changed would fail it."""
    ids = owned_ids(org)
    second = org.another_client("second")
    unmasking = replace(
        endpoint,
        params={**endpoint.params, "include_secrets": "true"},
        body=(
            {**endpoint.body, "include_secrets": True}
            if endpoint.body is not None and endpoint.reads_only
            else endpoint.body
        ),
    )
    before = _rows_of(org.client)

    for read_scope in (False, True):
        if read_scope:
            client_read_scopes_set(client=second.client, scopes=[org.client])
        key = api_key_create(client=second.client, reveals_secrets=True).plaintext
        api = api_client_with(key)
        for request in (endpoint, unmasking):
            response = call(api, request, **ids)
            assert response.status_code < 500, (read_scope, response.content)
            text = body(response).decode(errors="replace")  # an image download is bytes
            leaked = FIRST_CLIENTS_TEXT[:1] if read_scope else FIRST_CLIENTS_TEXT
            assert not [value for value in leaked if value in text], (read_scope, text)

        assert _rows_of(org.client) == before, read_scope
        assert EndUser.objects.filter(user_id=ids["user_id"]).exists()  # the first holds rows
