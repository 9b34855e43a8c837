"""The memory server's REST API as one end user of one API key: where it is, the key, the
user, and every error it answers turned into a sentence an agent (or its user) can act on.

The same client serves both transports: the stdio program reads its settings from the
environment (``MIRIX_API_URL``, ``MIRIX_API_KEY``, ``MIRIX_USER_ID``) and calls the API over
the network; the server's ``/mcp`` endpoint takes them from the request (its headers) and
calls the API in the same process through an httpx2 transport of its own. ``Naming`` says
where each setting came from, so that an error names the thing to fix in either case.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

import httpx2

DEFAULT_API_URL = "http://127.0.0.1:8531"  # where `make run` serves

# A search embeds its query and may wait on the database; the connection itself is local or
# near, so a refused or unreachable server is told quickly.
TIMEOUT = httpx2.Timeout(60.0, connect=5.0)
# Tries of an add whose answer was lost (``Api.add``): its turns carry their ids, so a retry
# stores nothing twice.
ADD_ATTEMPTS = 3


class ConfigurationError(Exception):
    """A setting the program cannot start with; the message names it and the fix."""


class ApiError(Exception):
    """An answer the agent can act on: what went wrong and what to change."""


@dataclass(frozen=True)
class Naming:
    """How the caller set the API's URL, key and end user (named in error messages)."""

    url: str = "MIRIX_API_URL"
    key: str = "MIRIX_API_KEY"
    user: str = "MIRIX_USER_ID"
    where: str = "the MCP server's environment"


@dataclass(frozen=True)
class Settings:
    """Where the API is, the key to call it with and the end user every tool acts for."""

    api_url: str
    api_key: str
    user_id: str
    naming: Naming = field(default_factory=Naming)


def settings_from_environment(environ: Mapping[str, str]) -> Settings:
    url = environ.get("MIRIX_API_URL", "").strip() or DEFAULT_API_URL
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        raise ConfigurationError(
            f"MIRIX_API_URL must be an http:// or https:// URL such as {DEFAULT_API_URL}, "
            f"not {url!r}."
        )
    key = environ.get("MIRIX_API_KEY", "").strip()
    if not key:
        raise ConfigurationError(
            "MIRIX_API_KEY is not set: give the MCP server an API key of the memory server "
            "(manage.py create_tenant or create_api_key prints one)."
        )
    user_id = environ.get("MIRIX_USER_ID", "").strip()
    if not user_id:
        raise ConfigurationError(
            "MIRIX_USER_ID is not set: name the end user whose memories the tools read and "
            "write (any id of yours, e.g. your login)."
        )
    return Settings(api_url=url.rstrip("/"), api_key=key, user_id=user_id)


def _detail(response: httpx2.Response) -> tuple[dict[str, Any], str]:
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    detail = str(body.get("detail") or response.reason_phrase or "error").strip().rstrip(".")
    return body, detail


def error_message(
    settings: Settings, response: httpx2.Response, parameter_names: Mapping[str, str]
) -> ApiError:
    """The tool error for an API error answer; ``parameter_names`` maps the API's field
    names to the tool's parameters, so that the agent is told which argument to fix."""
    body, detail = _detail(response)
    naming = settings.naming
    status = response.status_code
    if status == httpx2.codes.UNAUTHORIZED:
        return ApiError(
            f"The memory server refused {naming.key} (401: {detail}). Set {naming.key} in "
            f"{naming.where} to a valid, unrevoked key."
        )
    if status == httpx2.codes.FORBIDDEN and body.get("code") == "read_only_key":
        return ApiError(f"{detail}. This tool writes; use a read-write key ({naming.key}).")
    if status == httpx2.codes.UNPROCESSABLE_ENTITY:
        fields = body.get("fields") or {}
        problems = []
        for name, messages in fields.items():
            text = ", ".join(str(message).rstrip(".") for message in messages)
            if name == "user_id":
                problems.append(f"{naming.user}={settings.user_id!r} ({naming.where}): {text}")
            else:
                problems.append(f"{parameter_names.get(name, name)}: {text}")
        listed = "; ".join(problems) or detail
        return ApiError(f"Invalid arguments: {listed}. Fix them and call the tool again.")
    if status == httpx2.codes.TOO_MANY_REQUESTS:
        wait = response.headers.get("Retry-After")
        return ApiError(f"{detail}. Try again in {wait} s." if wait else f"{detail}.")
    return ApiError(f"The memory server answered {status}: {detail}.")


def _unreachable(settings: Settings, error: httpx2.HTTPError) -> ApiError:
    where = f"{settings.naming.url}={settings.api_url}"
    if isinstance(error, httpx2.TimeoutException):
        return ApiError(
            f"The memory server at {where} did not answer in time ({type(error).__name__}); "
            "try again."
        )
    return ApiError(
        f"Cannot reach the memory server at {where} ({error or type(error).__name__}). "
        f"Check that it is running and that {settings.naming.url} points at it."
    )


def _query(settings: Settings, params: Mapping[str, Any] | None) -> dict[str, Any]:
    query: dict[str, Any] = {"user_id": settings.user_id}
    for name, value in (params or {}).items():
        if value is not None:
            query[name] = str(value).lower() if isinstance(value, bool) else value
    return query


class Api:
    """The REST API as one user of one key. One HTTP client per program (its connections
    kept: a tool call is then one request on an open socket); ``transport`` replaces the
    network (the server's own endpoint calls its views in process)."""

    def __init__(
        self, settings: Settings, *, transport: httpx2.AsyncBaseTransport | None = None
    ) -> None:
        self.settings = settings
        self.client = httpx2.AsyncClient(
            base_url=settings.api_url,
            headers={"X-API-Key": settings.api_key, "Accept": "application/json"},
            timeout=TIMEOUT,
            transport=transport,
        )

    async def response(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        parameter_names: Mapping[str, str] | None = None,
    ) -> httpx2.Response:
        """The API's answer, its errors raised as ``ApiError`` (a 404 is returned: what it
        means depends on the call)."""
        query = _query(self.settings, params)
        payload = None
        if body is not None:
            payload = {"user_id": self.settings.user_id} | {
                name: value for name, value in body.items() if value is not None
            }
            query = {}
        try:
            response = await self.client.request(method, path, params=query, json=payload)
        except httpx2.HTTPError as error:
            raise _unreachable(self.settings, error) from error
        if response.is_error and response.status_code != httpx2.codes.NOT_FOUND:
            raise error_message(self.settings, response, parameter_names or {})
        return response

    async def call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        parameter_names: Mapping[str, str] | None = None,
        if_missing: Any = None,
    ) -> Any:
        """The API's JSON answer. ``if_missing``: the answer when the API says 404 — for a
        read of the user's rows, that nothing was stored for the user yet."""
        response = await self.response(
            method, path, params=params, body=body, parameter_names=parameter_names
        )
        if response.status_code == httpx2.codes.NOT_FOUND:
            if if_missing is not None:
                return if_missing
            raise error_message(self.settings, response, parameter_names or {})
        try:
            return response.json()
        except ValueError as error:
            raise ApiError(
                f"{self.settings.naming.url}={self.settings.api_url} answered "
                f"{response.status_code} with something other than JSON: is it the memory "
                "server?"
            ) from error

    async def add(
        self, body: Mapping[str, Any], *, parameter_names: Mapping[str, str] | None = None
    ) -> Any:
        """``POST /memory/add`` of ``body``'s turns, each given a ``client_message_id`` of its
        own, and sent again when the answer was lost (a timeout, a dropped connection): the
        server stores a turn whose id it already holds once, and answers the retry as it did
        the first, so a tool call never stores a turn twice (``ADD_ATTEMPTS``)."""
        body = dict(body) | {
            "messages": [
                {"client_message_id": f"mcp-{uuid.uuid4().hex}"} | turn for turn in body["messages"]
            ]
        }
        for _attempt in range(ADD_ATTEMPTS - 1):
            try:
                return await self.call(
                    "POST", "/memory/add", body=body, parameter_names=parameter_names
                )
            except ApiError as error:
                if not isinstance(error.__cause__, (httpx2.TimeoutException, httpx2.NetworkError)):
                    raise
        return await self.call("POST", "/memory/add", body=body, parameter_names=parameter_names)

    async def text(self, path: str) -> str | None:
        """A text answer (a SKILL.md); None when the API has no such thing (404)."""
        response = await self.response("GET", path)
        if response.status_code == httpx2.codes.NOT_FOUND:
            return None
        return response.text

    async def close(self) -> None:
        await self.client.aclose()


def key_check(settings: Settings) -> None:
    """One authenticated call before the program serves anything: a key the server refuses,
    or a server that does not answer, stops it at start with what to fix (``ApiError``)."""
    try:
        with httpx2.Client(base_url=settings.api_url, timeout=TIMEOUT) as client:
            # The end user's own record: 200, or 404 while nothing is stored for them; both
            # mean the key was accepted.
            response = client.get(
                f"/users/{quote(settings.user_id, safe='')}",
                headers={"X-API-Key": settings.api_key},
            )
    except httpx2.HTTPError as error:
        raise _unreachable(settings, error) from error
    if response.is_error and response.status_code != httpx2.codes.NOT_FOUND:
        raise error_message(settings, response, {})
    body, _ = _detail(response)
    if body.get("code" if response.is_error else "id") is None or (
        response.is_error and body["code"] != "not_found"
    ):
        raise ApiError(
            f"{settings.naming.url}={settings.api_url} answered {response.status_code} with "
            "something other than the memory server's JSON: is it the memory server?"
        )
