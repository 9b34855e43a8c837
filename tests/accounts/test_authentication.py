from __future__ import annotations

import pytest
from django.urls import get_resolver

from accounts.services import api_key_delete, api_key_revoke
from tests.endpoints import (
    ENDPOINTS,
    UNAUTHENTICATED_ROUTES,
    Endpoint,
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


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda e: f"{e.method} {e.path}")
class TestEveryEndpointRefusesBadKeys:
    @pytest.mark.parametrize(
        "key",
        [
            None,
            "",
            "not-a-key",
            "mxk_0123456789abcdef_" + "A" * 40,  # well formed, unknown id
            "mxk_0123456789abcdef_short",
            "Bearer",
        ],
        ids=["none", "empty", "malformed", "unknown", "bad-shape", "junk"],
    )
    def test_missing_or_malformed_key(
        self, db: None, endpoint: Endpoint, key: str | None, org
    ) -> None:
        response = call(api_client_with(key), endpoint, **owned_ids(org))
        assert response.status_code == 401
        assert response.json() == UNAUTHENTICATED
        assert response["WWW-Authenticate"]

    def test_wrong_secret(self, endpoint: Endpoint, org: TenantFixture) -> None:
        wrong = org.key[: -len("x")] + ("x" if not org.key.endswith("x") else "y")
        response = call(api_client_with(wrong), endpoint, **owned_ids(org))
        assert response.status_code == 401
        assert response.json() == UNAUTHENTICATED

    def test_revoked_key_refused_on_next_request(
        self, endpoint: Endpoint, org: TenantFixture
    ) -> None:
        ids = owned_ids(org)
        api_key, key = org.new_key()
        api = api_client_with(key)
        assert call(api, Endpoint("GET", "/users")).status_code == 200
        api_key_revoke(api_key=api_key)
        response = call(api, endpoint, **ids)
        assert response.status_code == 401
        assert response.json() == UNAUTHENTICATED

    def test_deleted_key_refused(self, endpoint: Endpoint, org: TenantFixture) -> None:
        ids = owned_ids(org)
        api_key, key = org.new_key()
        api_key_delete(api_key=api_key)
        response = call(api_client_with(key), endpoint, **ids)
        assert response.status_code == 401
        assert response.json() == UNAUTHENTICATED

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
    from mirix_site.redis import redis_client

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
