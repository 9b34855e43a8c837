"""The one place that decides which failures of a provider's HTTP API are worth retrying.

Embedding and LLM providers both POST JSON to a remote service and sort whatever goes wrong into
transient (the Celery task retries it later, honouring ``Retry-After``) and permanent. Each family
raises its own exception classes, which its callers catch, so ``post_json_object`` takes the two
classes to raise rather than defining its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

import requests

__all__ = [
    "TRANSIENT_HTTP_STATUSES",
    "error_excerpt",
    "http_status_transient",
    "post_json_object",
    "retry_after_seconds",
]

# Besides every 5xx: 408 request timeout, 409 conflict (OpenAI and Anthropic answer it for
# transient lock contention) and 429 rate limited, which the official OpenAI and Anthropic clients
# retry as well; and 425 too early, which asks for the same request again later (RFC 8470). A 5xx
# that never passes (501) costs only the task's few bounded retries. The one rule for every
# outgoing request: model providers and image hosts alike (images.fetch).
TRANSIENT_HTTP_STATUSES = frozenset({408, 409, 425, 429})


def http_status_transient(status: int) -> bool:
    """Whether the same request may pass later: every 5xx and ``TRANSIENT_HTTP_STATUSES``."""
    return status >= 500 or status in TRANSIENT_HTTP_STATUSES


ERROR_EXCERPT_CHARS = 300


class TransientErrorClass(Protocol):
    """An exception class for failures worth retrying, carrying the server's Retry-After."""

    def __call__(self, message: str, *, retry_after: float | None = None) -> Exception: ...


def retry_after_seconds(header: str | None) -> float | None:
    """``Retry-After`` as seconds from now, never negative; None when absent or unreadable.

    The header holds either a number of seconds or an HTTP date; a date already past reads as 0.
    """
    if not header:
        return None
    try:
        seconds = float(header)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def error_excerpt(text: str, *, api_key: str | None) -> str:
    """The start of ``text`` on one line, short enough for a log line, without the API key."""
    # Some servers echo the key they were sent; it must not reach logs or task results. Redacting
    # before cutting, so that a key across the cut cannot leave half of itself behind.
    if api_key:
        text = text.replace(api_key, "[redacted]")
    flattened = " ".join(text.split())
    if len(flattened) <= ERROR_EXCERPT_CHARS:
        return flattened or "(empty body)"
    return flattened[: ERROR_EXCERPT_CHARS - 1] + "…"


def post_json_object(
    session: requests.Session,
    url: str,
    *,
    body: dict[str, Any],
    headers: Mapping[str, str] | None = None,
    timeout: float,
    label: str,
    api_key: str | None,
    transient_error: TransientErrorClass,
    permanent_error: type[Exception],
) -> dict[str, Any]:
    """POST ``body`` as JSON and return the JSON object of a 2xx answer.

    Anything else raises ``transient_error`` or ``permanent_error``, with a message that starts
    with ``label`` and never contains ``api_key``. Nothing is chained to the exception of
    ``requests``, whose message may quote the request's headers.
    """
    try:
        response = session.post(url, headers=headers, json=body, timeout=timeout)
    except requests.Timeout as error:
        raise transient_error(
            f"{label} did not answer within {timeout:g} s ({type(error).__name__})"
        ) from None
    # ChunkedEncodingError is a connection dropped in the middle of the answer.
    except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as error:
        raise transient_error(
            f"{label} connection failed: {error_excerpt(str(error), api_key=api_key)}"
        ) from None
    except requests.RequestException as error:
        # Only the type: an invalid header value is quoted in repr form, which redaction of the
        # plain key would miss.
        raise permanent_error(
            f"{label} request could not be sent: {type(error).__name__}"
        ) from None

    status = response.status_code
    if http_status_transient(status):
        raise transient_error(
            f"{label} answered HTTP {status}: {error_excerpt(response.text, api_key=api_key)}",
            retry_after=retry_after_seconds(response.headers.get("Retry-After")),
        )
    if status in (401, 403):
        # The body of an authentication error may quote part of the key ("sk-...abcd"), which
        # redacting the whole key would not catch: leave it out.
        raise permanent_error(f"{label} rejected the API key (HTTP {status}).")
    if not 200 <= status < 300:
        raise permanent_error(
            f"{label} answered HTTP {status}: {error_excerpt(response.text, api_key=api_key)}"
        )
    try:
        payload = response.json()
    except ValueError:
        raise permanent_error(
            f"{label} answered HTTP {status} with a body that is not JSON: "
            f"{error_excerpt(response.text, api_key=api_key)}"
        ) from None
    if not isinstance(payload, dict):
        raise permanent_error(
            f"{label} answered HTTP {status} with JSON that is not an object: "
            f"{error_excerpt(response.text, api_key=api_key)}"
        )
    return payload
