"""The MCP server: an agent's whole memory as tools (``mirix_mcp.tools``), and its learned
skills as resources (``mirix_mcp.skills``).

Each tool is one call (or two) of the REST API as one end user of one key (``mirix_mcp.api``):
the API stays the one home of validation, and an error it answers reaches the agent as a tool
error naming the arguments to fix (the API's ``fields``, under the tools' parameter names),
never as a crash. ``server_create`` builds the server around a function giving the API client
of the call: one for the stdio program's life, one per request at the server's ``/mcp``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import CallToolResult, ListResourcesResult, PaginatedRequestParams, TextContent
from pydantic import AnyUrl, ValidationError

from mirix_mcp.api import Api, ApiError
from mirix_mcp.skills import EXTENSION, SkillWatch, skill_index, skill_read, skill_resources
from mirix_mcp.tools import experience_tools, memory_tools, task_tools


def arguments_error(error: ValidationError) -> str:
    problems = []
    for problem in error.errors(include_url=False):
        where = ".".join(str(part) for part in problem["loc"]) or "arguments"
        sent = "" if problem["type"] == "missing" else f" (got {repr(problem['input'])[:80]})"
        problems.append(f"{where}: {problem['msg']}{sent}")
    return f"Invalid arguments: {'; '.join(problems)}. Fix them and call the tool again."


class MemoryServer(MCPServer):
    """The SDK's MCPServer with tool errors an agent can act on, results in few tokens, and
    the user's skills as resources read from the API at each call.

    The SDK reports a bad argument as a pydantic dump and an API error as its exception text;
    both come out as one sentence of what to fix. A result's text (what most clients show the
    model) is its structured content on one line: the SDK indents it, a third more tokens on a
    list of experiences."""

    def __init__(
        self,
        api: Callable[[], Api],
        *,
        watch: SkillWatch | None,
        **settings: Any,
    ) -> None:
        super().__init__("mirix", instructions=INSTRUCTIONS, log_level="WARNING", **settings)
        self.api = api
        self.watch = watch
        # Declared at initialization: the skills extension — among the capabilities'
        # `extensions` (SEP-2133) on the 2026-07-28 revision, and `experimental` on the earlier
        # ones, which have no such field (the SDK sieves it out) — and list-change
        # notifications where a session lives long enough to receive them (stdio; /mcp
        # answers each request on its own).
        lowlevel = self._lowlevel_server
        lowlevel.extensions = {**(lowlevel.extensions or {}), EXTENSION: {}}
        lowlevel.create_initialization_options = partial(  # type: ignore[method-assign]
            lowlevel.create_initialization_options,
            NotificationOptions(resources_changed=watch is not None),
            {EXTENSION: {}},
        )

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> Any:
        try:
            result = await super().call_tool(name, arguments, context)
        except ToolError as error:
            cause = error.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(arguments_error(cause)) from cause
            if isinstance(cause, ApiError):
                raise ToolError(str(cause)) from cause
            raise
        if isinstance(result, CallToolResult) and result.structured_content is not None:
            text = json.dumps(result.structured_content, ensure_ascii=False, default=str)
            result.content = [TextContent(type="text", text=text)]
        return result

    async def _handle_list_resources(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        api = self.api()
        try:
            index = await skill_index(api)
        except ApiError as error:
            raise ResourceError(str(error)) from error
        if self.watch is not None:
            self.watch.listed(ctx.session, index)
        return ListResourcesResult(resources=skill_resources(index, api.settings.user_id))

    async def read_resource(
        self, uri: AnyUrl | str, context: Context | None = None
    ) -> Iterable[ReadResourceContents]:
        try:
            text, mime_type = await skill_read(self.api(), str(uri))
        except ApiError as error:
            raise ResourceError(str(error)) from error
        return [ReadResourceContents(content=text, mime_type=mime_type)]


INSTRUCTIONS = """\
Long-term memory for this user and what worked before. Call remember when the user tells you
something worth keeping, and search_memories before answering from what they said earlier.
For a piece of work: start_task, log_step for each tool call and its result, finish_task with
the outcome; finished tasks teach skills, which retrieve_skills finds (and the skill://
resources hold). Before a task you may have done before, call recommend_action; after acting,
record_experience with the outcome (record_failure with the reason when it failed)."""


def server_create(api: Callable[[], Api], *, watch_seconds: float | None = None) -> MemoryServer:
    """The MCP server; ``api()`` gives the API client of the call being served.
    ``watch_seconds``: poll the user's skills that often and tell the sessions that listed
    them of a change (a long-lived session: stdio)."""
    watch = SkillWatch() if watch_seconds else None

    @asynccontextmanager
    async def watching(server: MCPServer) -> AsyncIterator[None]:
        async def poll() -> None:
            while True:
                await anyio.sleep(watch_seconds or 0)
                try:
                    await watch.check(api())  # type: ignore[union-attr]
                except ApiError:
                    continue  # the server is down or the key revoked: tools say so

        async with anyio.create_task_group() as group:
            group.start_soon(poll)
            try:
                yield
            finally:
                group.cancel_scope.cancel()

    server = MemoryServer(api, watch=watch, **({"lifespan": watching} if watch else {}))
    experience_tools(server, api)
    memory_tools(server, api)
    task_tools(server, api)
    return server
