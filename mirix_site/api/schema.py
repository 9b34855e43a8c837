"""The OpenAPI schema's account of errors: the one ``Error`` body (``mirix_site.api.errors``) and
the error answers every operation can give, added here from what the operation is rather than
declared view by view.

What an operation is decides what it may answer:
- a body (JSON only, ``mirix_site.api.parsers``): 400 not JSON or nested too deep, 413 too big,
  415 not JSON at all;
- an API key (every operation but ``/health``): 401 without a valid one, 429 over its rate;
- a write (``mirix_site.api.permissions.view_writes``): 403 for a read-only key;
- an object it names (a path parameter, or a required ``user_id``: the operations that may
  create the user take it optional): 404;
- any: 422, for a parameter or body field that fails validation, and a NUL character in any
  query parameter (``mirix_site.api.middleware``).

Views declare only the errors particular to them (a conflict, a permission a parameter needs)
with ``error_response``.

Query parameters are declared as the API reads them: an optional one may be empty (DRF reads
``?limit=`` as no limit given), text holds no NUL, and an object is JSON text
(``content: application/json``).
"""

from __future__ import annotations

import copy
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ComponentRegistry, force_instance, is_serializer
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers

from mirix_site.api.fields import JsonTextField, TextField
from mirix_site.api.parsers import MAX_JSON_DEPTH
from mirix_site.api.permissions import view_writes

# The field naming the end user an operation is about (``accounts.api.serializers``).
USER_ID = "user_id"


class ErrorSerializer(serializers.Serializer):
    """Every 4xx and 5xx body of the API."""

    detail = TextField(help_text="a sentence for people")
    code = TextField(help_text="a stable code for programs, e.g. not_found, invalid")
    fields = serializers.DictField(
        child=serializers.ListField(child=TextField()),
        required=False,
        help_text="validation errors only: messages by field, nested fields dotted "
        "(messages.0.role)",
    )


def error_response(description: str) -> OpenApiResponse:
    """An error answer particular to one view, for its ``extend_schema(responses=...)``."""
    return OpenApiResponse(ErrorSerializer, description=description)


BODY_ERRORS = {
    400: f"The body is not JSON, or is nested more than {MAX_JSON_DEPTH} levels deep.",
    413: "The body is over the server's limit (API_MAX_BODY_BYTES).",
    415: "The body is not application/json.",
}
KEY_ERRORS = {401: "No API key, or one that is malformed, unknown or revoked."}
THROTTLED = {429: "Over the API key's rate limit; retry after Retry-After seconds."}
WRITE_ERRORS = {403: "This API key is read-only."}
# What the web server itself answers, before the API reads anything (mirix_site.webserver).
TRANSPORT_ERRORS = {
    414: "The request line (the URL with its query string) is longer than the server reads.",
    431: "The request's header fields are larger than the server reads.",
}
NOT_FOUND = {
    404: "No such object, or one this API key may not see; for a write, also one its client "
    "does not own (another client's, readable through a read scope, is read-only in every "
    "sense and answers as if missing)."
}
INVALID = {
    422: "Invalid input: `fields` names each parameter or body field at fault (a NUL "
    "character in any query parameter included)."
}
NO_NUL_PATTERN = "^[^\\u0000]*$"
HEADERS = {
    401: {
        "WWW-Authenticate": {
            "schema": {"type": "string"},
            "description": "the scheme to authenticate with",
        }
    },
    429: {
        "Retry-After": {
            "schema": {"type": "integer", "minimum": 1},
            "description": "seconds until the rate limit's window ends",
        }
    },
}


class JsonTextFieldSchema(OpenApiSerializerFieldExtension):
    target_class = JsonTextField
    match_subclasses = True

    def map_serializer_field(self, auto_schema: AutoSchema, direction: str) -> dict[str, Any]:
        return copy.deepcopy(self.target.json_schema)


class ApiAutoSchema(AutoSchema):
    def get_operation(
        self,
        path: str,
        path_regex: str,
        path_prefix: str,
        method: str,
        registry: ComponentRegistry,
    ) -> dict[str, Any] | None:
        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is None:
            return None
        responses = operation["responses"]
        for status, description in self._error_answers(operation).items():
            responses.setdefault(str(status), self._error_response(status, description))
        operation["responses"] = dict(sorted(responses.items()))
        return operation

    def resolve_serializer(
        self, serializer: Any, direction: str, bypass_extensions: bool = False
    ) -> Any:
        # drf-spectacular reads a PATCH body as partial, as DRF's partial_update would; no view
        # here does (none passes partial=True): a field the body requires is required, and
        # missing answers 422. The serializer is the schema generator's own copy.
        if direction == "request" and getattr(serializer, "partial", False):
            serializer.partial = False
        return super().resolve_serializer(serializer, direction, bypass_extensions)

    def _get_parameters(self) -> list[dict[str, Any]]:
        parameters = super()._get_parameters()
        return [_json_in_query(_nul_refused(_empty_allowed(p))) for p in parameters]

    def _error_answers(self, operation: dict[str, Any]) -> dict[int, str]:
        answers: dict[int, str] = {}
        if "requestBody" in operation:
            answers |= BODY_ERRORS
        if operation.get("security"):
            answers |= KEY_ERRORS
            if self.view.get_throttles():
                answers |= THROTTLED
            if view_writes(self.view, self.method):
                answers |= WRITE_ERRORS
        if self._names_an_object(operation):
            answers |= NOT_FOUND
        return answers | INVALID | TRANSPORT_ERRORS

    def _names_an_object(self, operation: dict[str, Any]) -> bool:
        parameters = operation.get("parameters", [])
        if any(parameter["in"] == "path" for parameter in parameters):
            return True
        required_query = {
            parameter["name"]
            for parameter in parameters
            if parameter["in"] == "query" and parameter.get("required")
        }
        if USER_ID in required_query:
            return True
        if "requestBody" not in operation:
            return False
        body = force_instance(self.get_request_serializer())
        return is_serializer(body) and USER_ID in body.fields and body.fields[USER_ID].required

    def _error_response(self, status: int, description: str) -> dict[str, Any]:
        component = self.resolve_serializer(ErrorSerializer, "response")
        response: dict[str, Any] = {
            "description": description,
            "content": {"application/json": {"schema": component.ref}},
        }
        if status in HEADERS:
            response["headers"] = HEADERS[status]
        return response


def _empty_allowed(parameter: dict[str, Any]) -> dict[str, Any]:
    """DRF reads ``?limit=`` in a query string as no limit given (``Field.get_value``): an
    optional query parameter may be empty."""
    if parameter["in"] == "query" and not parameter.get("required"):
        return parameter | {"allowEmptyValue": True}
    return parameter


def _nul_refused(parameter: dict[str, Any]) -> dict[str, Any]:
    """A query parameter's text holds no NUL (``mirix_site.api.middleware`` answers 422)."""
    schema = parameter.get("schema", {})
    if (
        parameter["in"] != "query"
        or schema.get("type") != "string"
        or {"enum", "format"} & set(schema)
    ):
        return parameter
    no_nul = {"pattern": NO_NUL_PATTERN}
    if "pattern" in schema:
        return parameter | {"schema": schema | {"allOf": [no_nul]}}
    return parameter | {"schema": schema | no_nul}


def _json_in_query(parameter: dict[str, Any]) -> dict[str, Any]:
    """A query parameter whose value is an object or a list is JSON text (a ``JsonTextField``,
    whose empty text means no value): OpenAPI says so with ``content``, rather than the
    form-exploded ``?key=value`` pairs a bare object schema means in a query."""
    schema = parameter.get("schema", {})
    if parameter["in"] != "query" or schema.get("type") not in {"object", "array"}:
        return parameter
    rest = {
        key: value for key, value in parameter.items() if key not in {"schema", "style", "explode"}
    }
    return rest | {"content": {"application/json": {"schema": schema}}}
