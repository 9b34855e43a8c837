"""API key authentication: ``X-API-Key: mxk_…`` or ``Authorization: Bearer mxk_…``."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed, Throttled
from rest_framework.request import Request

from accounts.keycache import address_blocked_for, client_address, key_cache_store, key_gate
from accounts.keys import key_parse, secret_digest
from accounts.models import ApiKey
from accounts.selectors import api_key_authenticate
from accounts.tenancy import Tenant

# Every refusal (missing, malformed, unknown, wrong secret, revoked, deleted) reads the same,
# so a caller learns nothing about which keys exist.
UNAUTHENTICATED_DETAIL = "Missing or invalid API key."
AUTH_FAILURES_DETAIL = "Too many failed authentications from this address; try again later."


# What HTTP itself allows around a header's value (RFC 9110 5.5): only this is trimmed, so a
# key with any other character before or after it (a no-break space) is not the key.
_HTTP_WHITESPACE = " \t"


def presented_key(request: Request) -> str | None:
    header_key = request.META.get("HTTP_X_API_KEY")
    if header_key:
        return header_key.strip(_HTTP_WHITESPACE)
    authorization = request.META.get("HTTP_AUTHORIZATION")
    if not authorization:
        return None
    scheme, _, credentials = authorization.strip(_HTTP_WHITESPACE).partition(" ")
    if scheme.lower() != "bearer":
        # Some other scheme: a key was offered but not one we accept. Refuse it, do not ignore it.
        return ""
    return credentials.strip(_HTTP_WHITESPACE)


def _refuse_if_blocked(blocked_for: float | None) -> None:
    """An address over its failed-authentication limit is answered 429 before any key is
    checked, a valid one included: otherwise the answer would still tell a guess from a key."""
    if blocked_for is not None:
        raise Throttled(wait=blocked_for, detail=AUTH_FAILURES_DETAIL)


class ApiKeyAuthentication(BaseAuthentication):
    """Resolves the key in one Redis round trip (cached record + rate counter, kept on the
    request as ``key_gate`` for the throttle) and, on a cache miss, one database query."""

    def authenticate(self, request: Request) -> tuple[Tenant, ApiKey] | None:
        presented = presented_key(request)
        parsed = key_parse(presented) if presented else None
        if parsed is None:
            _refuse_if_blocked(
                address_blocked_for(
                    scope="api",
                    address=client_address(request),
                    rate=settings.AUTH_FAILURE_RATE_LIMIT,
                )
            )
            if presented is None:
                return None
            raise AuthenticationFailed(UNAUTHENTICATED_DETAIL)
        gate = key_gate(
            key_id=parsed.key_id,
            presented_digest=secret_digest(parsed.secret),
            rate=settings.API_RATE_LIMIT,
            address=client_address(request),
            failures_rate=settings.AUTH_FAILURE_RATE_LIMIT,
        )
        _refuse_if_blocked(gate.address_blocked_for)
        api_key = api_key_authenticate(presented=presented, cached=gate.cached)
        if api_key is None:
            raise AuthenticationFailed(UNAUTHENTICATED_DETAIL)
        request.key_gate = gate
        if gate.cached is None and not gate.changed_recently and gate.rate_used is not None:
            key_cache_store(api_key)
        return Tenant.for_api_key(api_key), api_key

    def authenticate_header(self, request: Request) -> str:
        # Naming a scheme makes DRF answer 401 (not 403) when no key is given.
        return 'Bearer realm="mirix"'


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    """Documents the two ways of presenting a key in the OpenAPI schema."""

    target_class = ApiKeyAuthentication
    name = ["ApiKeyHeader", "BearerKey"]

    def get_security_requirement(self, auto_schema: Any) -> list[dict[str, list[Any]]]:
        return [{"ApiKeyHeader": []}, {"BearerKey": []}]  # either one, not both

    def get_security_definition(self, auto_schema: Any) -> list[dict[str, str]]:
        return [
            {"type": "apiKey", "in": "header", "name": "X-API-Key"},
            {"type": "http", "scheme": "bearer", "bearerFormat": "mxk_<key id>_<secret>"},
        ]
