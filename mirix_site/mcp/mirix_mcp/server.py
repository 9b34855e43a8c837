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
from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ResourceError, ToolError
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.lowlevel.server import NotificationOptions
from mcp.types import Resource, TextContent
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


class MemoryServer(FastMCP):
    """FastMCP with tool errors an agent can act on, results in few tokens, and the user's
    skills as resources read from the API at each call.

    FastMCP reports a bad argument as a pydantic dump prefixed "Error executing tool", and an
    API error as its exception text under the same prefix; both come out as one sentence of
    what to fix. A result's text (what most clients show the model) is its structured content
    on one line: FastMCP indents it, a third more tokens on a list of experiences."""

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
        # Declared at initialization: the skills extension, and list-change notifications
        # where a session lives long enough to receive them (stdio; /mcp answers each request
        # on its own).
        self._mcp_server.create_initialization_options = partial(  # type: ignore[method-assign]
            self._mcp_server.create_initialization_options,
            NotificationOptions(resources_changed=watch is not None),
            {EXTENSION: {}},
        )

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        try:
            result = await super().call_tool(name, arguments)
        except ToolError as error:
            cause = error.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(arguments_error(cause)) from cause
            if isinstance(cause, ApiError):
                raise ToolError(str(cause)) from cause
            raise
        if isinstance(result, tuple):  # (content, structured content): every tool here
            structured = result[1]
            text = json.dumps(structured, ensure_ascii=False, default=str)
            return [TextContent(type="text", text=text)], structured
        return result

    async def list_resources(self) -> list[Resource]:
        api = self.api()
        try:
            index = await skill_index(api)
        except ApiError as error:
            raise ResourceError(str(error)) from error
        if self.watch is not None:
            self.watch.listed(self.get_context().session, index)
        return skill_resources(index, api.settings.user_id)

    async def read_resource(self, uri: AnyUrl | str) -> Iterable[ReadResourceContents]:
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
    async def watching(server: FastMCP) -> AsyncIterator[None]:
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
