"""``/mcp``: the MCP tools and skill resources over streamable HTTP, on the API's port, for a
team whose editors share one URL.

The same server as the stdio program (``mirix_mcp.server_create``): its tools call the REST
API, here in this process — each call is handled by the API's own views and middleware on the
thread serving ``/mcp`` (``InProcessApi``), so that validation, tenancy, read-only keys,
throttling and history are the API's, with the key the caller presented. The request's key is
checked first, as on every endpoint (401 in the API's error shape); the end user is named by
the ``X-User-Id`` header or the ``user_id`` query parameter (``/mcp?user_id=sam``).

The transport is stateless and answers JSON (no server-sent events): any web process can
serve any request, as with the rest of the API. So ``GET /mcp`` (a stream for the server's own
messages) and ``DELETE /mcp`` (ending a session) answer 405, as the transport's specification
allows, and a skill list change is not pushed over HTTP: a client lists the resources again
(the stdio program, one long session, is told).
"""

from __future__ import annotations

import contextvars
import io
import json
import sys
from functools import cache
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

import anyio
import httpx2
from asgiref.sync import async_to_sync, sync_to_async
from django.core.handlers.base import BaseHandler
from django.core.handlers.wsgi import WSGIRequest
from django.http import HttpResponse, JsonResponse
from drf_spectacular.utils import extend_schema
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mirix_mcp import Api, Naming, Settings, server_create
from mirix_mcp.server import MemoryServer
from rest_framework.request import Request

from mirix_site.api.authentication import presented_key
from mirix_site.api.base import TenantAPIView, UserQuerySerializer
from mirix_site.api.errors import error_body

NAMING = Naming(
    url="the server's URL",
    key="the X-API-Key header",
    user="the X-User-Id header",
    where="the MCP client's settings for this server",
)

# The API client of the request being served, read by the tools (set per request).
_request_api: contextvars.ContextVar[Api] = contextvars.ContextVar("mcp_request_api")


@cache
def mcp_server() -> MemoryServer:
    """One server per process: its tools read the request's API client from the context."""
    return server_create(_request_api.get)


class _ApiHandler(BaseHandler):
    """The API's views behind their middleware, without the request signals: a call from a
    tool is part of the ``/mcp`` request, whose own signals open and close the connection."""

    def __init__(self) -> None:
        super().__init__()
        self.load_middleware()


@cache
def _api_handler() -> _ApiHandler:
    return _ApiHandler()


class InProcessApi(httpx2.AsyncBaseTransport):
    """An httpx2 transport that hands each request to the API's views in this process, on the
    thread serving ``/mcp`` (its database connection and transaction), as a WSGI request from
    the caller's address."""

    def __init__(self, *, remote_addr: str, scheme: str) -> None:
        self.remote_addr = remote_addr
        self.scheme = scheme

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        status, headers, content = await sync_to_async(self._respond, thread_sensitive=True)(
            request, body
        )
        return httpx2.Response(status, headers=headers, content=content, request=request)

    def _respond(self, request: httpx2.Request, body: bytes) -> tuple[int, list[Any], bytes]:
        environ = {
            "REQUEST_METHOD": request.method,
            "SCRIPT_NAME": "",
            "PATH_INFO": unquote(request.url.path),
            "QUERY_STRING": request.url.query.decode("ascii"),
            "SERVER_NAME": request.url.host,
            "SERVER_PORT": str(request.url.port or (443 if self.scheme == "https" else 80)),
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": self.remote_addr,
            "wsgi.url_scheme": self.scheme,
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "CONTENT_LENGTH": str(len(body)),
        }
        for name, value in request.headers.items():
            key = name.upper().replace("-", "_")
            if key in {"CONTENT_TYPE", "CONTENT_LENGTH"}:
                environ[key] = value
            else:
                environ[f"HTTP_{key}"] = value
        response = _api_handler().get_response(WSGIRequest(environ))
        content = b"".join(response) if response.streaming else response.content
        return response.status_code, list(response.items()), content


async def _served(scope: dict[str, Any], body: bytes, api: Api) -> tuple[int, list, bytes]:
    """The MCP SDK's answer to one request (stateless, JSON)."""
    sent: list[dict[str, Any]] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await anyio.sleep_forever()  # no disconnect to report: the request is whole
        raise AssertionError  # pragma: no cover - sleep_forever never returns

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    manager = StreamableHTTPSessionManager(
        app=mcp_server()._lowlevel_server, stateless=True, json_response=True
    )
    token = _request_api.set(api)
    try:
        async with manager.run():
            await manager.handle_request(scope, receive, send)
    finally:
        _request_api.reset(token)
        await api.close()
    start = next(message for message in sent if message["type"] == "http.response.start")
    content = b"".join(
        message.get("body", b"") for message in sent if message["type"] == "http.response.body"
    )
    return start["status"], start.get("headers", []), content


class McpApi(TenantAPIView):
    """The MCP endpoint: one JSON-RPC message (or batch) in, its answer out."""

    # Reads and writes both come as POST: each tool's call is checked by the API it calls.
    writes = False

    @extend_schema(exclude=True)  # JSON-RPC, described by MCP, not by this API's schema
    def post(self, request: Request) -> HttpResponse:
        named = request.headers.get("X-User-Id") or request.query_params.get("user_id")
        user = UserQuerySerializer(data={"user_id": named})
        user.is_valid(raise_exception=True)
        # Read by the API's parser (its content type, size and depth rules, its errors), then
        # handed to the SDK as JSON again.
        message = json.dumps(request.data, ensure_ascii=False).encode()
        api = Api(
            Settings(
                api_url=request.build_absolute_uri("/").rstrip("/"),
                api_key=presented_key(request) or "",
                user_id=user.validated_data["user_id"],
                naming=NAMING,
            ),
            transport=InProcessApi(
                remote_addr=request.META.get("REMOTE_ADDR", ""), scheme=request.scheme
            ),
        )
        status, headers, content = async_to_sync(_served)(_scope(request), message, api)
        if status >= HTTPStatus.BAD_REQUEST:
            return _refusal(status, content)
        response = HttpResponse(content, status=status)
        for name, value in headers:
            if name.lower() != b"content-length":
                response[name.decode("latin-1")] = value.decode("latin-1")
        return response


def _scope(request: Request) -> dict[str, Any]:
    """The ASGI scope of the request, as the SDK reads it. A client that accepts anything
    (``*/*``, or no Accept header) is answered JSON."""
    headers = {name.lower(): value for name, value in request.headers.items()}
    accept = headers.get("accept", "")
    if not accept or "*/*" in accept:
        headers["accept"] = "application/json"
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode(),
        "query_string": request.META.get("QUERY_STRING", "").encode(),
        "root_path": "",
        "headers": [
            (name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()
        ],
        "client": (request.META.get("REMOTE_ADDR", ""), 0),
        "server": (request.get_host(), 0),
    }


def _refusal(status: int, content: bytes) -> JsonResponse:
    """The SDK's refusal of a message (not JSON-RPC, an unknown version, a wrong Accept) in
    the API's error shape, its JSON-RPC error kept beside it for an MCP client."""
    try:
        answer = json.loads(content)
    except ValueError:
        answer = {}
    error = answer.get("error") if isinstance(answer, dict) else None
    detail = (error or {}).get("message") or HTTPStatus(status).phrase
    body = error_body(f"Not an MCP request this endpoint serves: {detail}", "invalid_mcp_message")
    if error:
        body |= {"jsonrpc": "2.0", "id": answer.get("id"), "error": error}
    return JsonResponse(body, status=status)
