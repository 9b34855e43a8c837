"""API key authentication: ``X-API-Key: mxk_…`` or ``Authorization: Bearer mxk_…``."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from accounts.models import ApiKey
from accounts.selectors import api_key_authenticate
from accounts.tenancy import Tenant

# Every refusal (missing, malformed, unknown, wrong secret, revoked, deleted) reads the same,
# so a caller learns nothing about which keys exist.
UNAUTHENTICATED_DETAIL = "Missing or invalid API key."


def presented_key(request: Request) -> str | None:
    header_key = request.META.get("HTTP_X_API_KEY")
    if header_key:
        return header_key.strip()
    authorization = request.META.get("HTTP_AUTHORIZATION")
    if not authorization:
        return None
    scheme, _, credentials = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        # Some other scheme: a key was offered but not one we accept. Refuse it, do not ignore it.
        return ""
    return credentials.strip()


class ApiKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Tenant, ApiKey] | None:
        presented = presented_key(request)
        if presented is None:
            return None
        api_key = api_key_authenticate(presented=presented)
        if api_key is None:
            raise AuthenticationFailed(UNAUTHENTICATED_DETAIL)
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
