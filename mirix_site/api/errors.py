"""The one error shape: ``{"detail": str, "code": str, "fields": {name: [messages]}}``.

Every API error leaves through ``exception_handler``; Django's own 404/500 pages for paths
outside the API use the same shape (``json_404`` / ``json_500``). The domain's four kinds of
refusal (``mirix_site.common.errors``) are answered here, each one way: views do not catch them. An
unexpected exception is logged with its traceback and answered with a generic 500 that carries
none of it. A database out of reach (restarting, failing over) is not a bug: 503 with
``Retry-After``, logged in one line; the next request after it is back reconnects
(``CONN_HEALTH_CHECKS``).
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, HttpRequest, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from accounts.keycache import address_failure_record, client_address
from mirix_site.api.authentication import UNAUTHENTICATED_DETAIL, presented_key
from mirix_site.common.database import database_unreachable
from mirix_site.common.errors import ConflictError, DomainError, InvalidInputError, NotFoundError

logger = logging.getLogger(__name__)

NOT_FOUND_DETAIL = "Not found."
SERVER_ERROR_DETAIL = "Internal server error."


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the current state of the resource."
    default_code = "conflict"


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"

    def __init__(self) -> None:
        super().__init__(f"The request body is over {settings.API_MAX_BODY_BYTES:,} bytes.")


class DatabaseUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The database is unavailable; try again shortly."
    default_code = "unavailable"
    # Seconds, sent as Retry-After: a restart of the embedded PostgreSQL takes one or two.
    wait = 2


class UnprocessableEntity(exceptions.ValidationError):
    """A validation error raised outside a serializer (422, like every validation error)."""


def error_body(
    detail: str, code: str, fields: dict[str, list[str]] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"detail": detail, "code": code}
    if fields is not None:
        body["fields"] = fields
    return body


def _flatten(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error detail as ``{"messages.0.role": ["..."]}``."""
    if isinstance(detail, dict):
        flat: dict[str, list[str]] = {}
        for key, value in detail.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            flat.update(_flatten(value, name))
        return flat
    if isinstance(detail, list):
        if all(not isinstance(item, dict | list) for item in detail):
            return {prefix or "non_field_errors": [str(item) for item in detail]}
        flat = {}
        for index, item in enumerate(detail):
            if item:
                flat.update(_flatten(item, f"{prefix}.{index}" if prefix else str(index)))
        return flat
    return {prefix or "non_field_errors": [str(detail)]}


def validation_body(fields: dict[str, list[str]]) -> dict[str, Any]:
    """A 422's body: messages by field, the first of them in ``detail``."""
    first_field, messages = next(iter(fields.items()), ("", ["Invalid input."]))
    where = "" if first_field == "non_field_errors" else f"{first_field}: "
    return error_body(f"Invalid input. {where}{messages[0]}", "invalid", fields)


class NamedNotFound(exceptions.NotFound):
    """A 404 whose sentence names what is missing among the caller's own things (an agent
    name of its meta agent, as MIRIX words it); never about another tenant's, which answers
    as any missing object does."""


def _domain_answer(exc: DomainError) -> exceptions.APIException:
    """The one answer of each kind of domain refusal."""
    if isinstance(exc, NotFoundError) and exc.shown:
        return NamedNotFound(str(exc))
    if isinstance(exc, ConflictError):
        return Conflict(str(exc), code=exc.code)
    if isinstance(exc, InvalidInputError):
        return UnprocessableEntity(exc.fields)
    # NotFoundError, ReadOnlyError: as any missing object.
    return exceptions.NotFound(NOT_FOUND_DETAIL)


def _as_api_exception(exc: Exception) -> Exception:
    if isinstance(exc, Http404 | ObjectDoesNotExist):
        return exceptions.NotFound(NOT_FOUND_DETAIL)
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied()
    if isinstance(exc, RequestDataTooBig):
        return PayloadTooLarge()
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else exc.messages
        return exceptions.ValidationError(detail)
    if database_unreachable(exc):
        logger.warning("database unreachable: %s", type(exc.__cause__ or exc).__name__)
        return DatabaseUnavailable()
    return exc


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    exc = _domain_answer(exc) if isinstance(exc, DomainError) else _as_api_exception(exc)
    response = drf_exception_handler(exc, context)
    if response is None:
        set_rollback()
        view = context.get("view")
        logger.exception(
            "unhandled error in %s", type(view).__name__ if view else "API", exc_info=exc
        )
        return Response(error_body(SERVER_ERROR_DETAIL, "server_error"), status=500)

    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        response.status_code = status.HTTP_401_UNAUTHORIZED
        response.data = error_body(UNAUTHENTICATED_DETAIL, "not_authenticated")
        # Counted here, where every 401 leaves (a missing key is refused by the permission
        # check, a bad one by the authentication); the authentication refuses past the limit.
        # A browser's CORS preflight (OPTIONS, never with credentials) is no attempt.
        request = context["request"]
        if not (request.method == "OPTIONS" and presented_key(request) is None):
            address_failure_record(
                scope="api",
                address=client_address(request),
                rate=settings.AUTH_FAILURE_RATE_LIMIT,
            )
    elif isinstance(exc, exceptions.ValidationError):
        response.status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
        response.data = validation_body(_flatten(exc.detail))
    elif isinstance(exc, NamedNotFound):
        response.data = error_body(str(exc.detail), "not_found")
    elif isinstance(exc, exceptions.NotFound):
        response.data = error_body(NOT_FOUND_DETAIL, "not_found")
    elif isinstance(exc, exceptions.APIException):
        codes = exc.get_codes()
        code = codes if isinstance(codes, str) else exc.default_code
        response.data = error_body(str(exc.detail), str(code))
    return response


def json_404(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse(error_body(NOT_FOUND_DETAIL, "not_found"), status=404)


def json_500(request: HttpRequest) -> JsonResponse:
    return JsonResponse(error_body(SERVER_ERROR_DETAIL, "server_error"), status=500)
