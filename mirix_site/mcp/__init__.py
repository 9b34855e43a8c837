"""The MCP server (``mirix-mcp``, ``python -m mirix_site.mcp``): an agent's tools over stdio,
each one call (or two) of this server's REST API as one user of one API key.

It is a client of the API like any other: no Django settings, no database, only
``MIRIX_API_URL``, ``MIRIX_API_KEY`` and ``MIRIX_USER_ID``. The API stays the one home of
validation; an error it answers reaches the agent as a tool error naming the arguments to fix
(the API's ``fields``, under the tools' parameter names), never as a crash of the server.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import httpx
from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.types import TextContent, ToolAnnotations
from pydantic import Field, ValidationError

DEFAULT_API_URL = "http://127.0.0.1:8531"  # where `make run` serves

# The API's choices, repeated here so that an agent reads them in the tools' schemas;
# tests/test_mcp.py checks them against the live server's OpenAPI schema.
Outcome = Literal["success", "failure", "partial"]
MemoryType = Literal["all", "episodic", "semantic", "procedural", "resource", "knowledge_vault"]

# A search embeds its query and may wait on the database; the connection itself is local or
# near, so a refused or unreachable server is told quickly.
TIMEOUT = httpx.Timeout(60.0, connect=5.0)

# Bookkeeping fields of the API's answers that an agent has no use for; dropped to keep tool
# results short (an agent pays for every token it reads).
MEMORY_BOOKKEEPING = frozenset(
    {
        "user_id",
        "client_id",
        "filter_tags",
        "source_message_ids",
        "updated_at",
        "ranks",
        "score",  # the fused rank score: the order says it
        "bm25_score",
        "gate",
    }
)
EXPERIENCE_FIELDS = (
    "id",
    "task",
    "action",
    "outcome",
    "score",
    "reason",
    "context",
    "occurred_at",
    "origin",
    "recommendation_id",
    "superseded_by",
)


class ConfigurationError(Exception):
    """An environment variable the server cannot start with; the message names it."""


@dataclass(frozen=True)
class Settings:
    """Where the API is, the key to call it with and the end user every tool acts for."""

    api_url: str
    api_key: str
    user_id: str


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


class ApiError(Exception):
    """An answer the agent can act on: what went wrong and what to change."""


def error_message(
    settings: Settings, response: httpx.Response, parameter_names: Mapping[str, str]
) -> ApiError:
    """The tool error for an API error answer; ``parameter_names`` maps the API's field
    names to the tool's parameters, so that the agent is told which argument to fix."""
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    detail = str(body.get("detail") or response.reason_phrase or "error").strip().rstrip(".")
    status = response.status_code
    if status == httpx.codes.UNAUTHORIZED:
        return ApiError(
            f"The memory server refused MIRIX_API_KEY (401: {detail}). Set MIRIX_API_KEY in "
            "the MCP server's environment to a valid, unrevoked key."
        )
    if status == httpx.codes.FORBIDDEN and body.get("code") == "read_only_key":
        return ApiError(
            f"{detail}. This tool writes; give the MCP server a read-write MIRIX_API_KEY."
        )
    if status == httpx.codes.UNPROCESSABLE_ENTITY:
        fields = body.get("fields") or {}
        problems = []
        for field, messages in fields.items():
            text = ", ".join(str(message).rstrip(".") for message in messages)
            if field == "user_id":
                problems.append(
                    f"MIRIX_USER_ID={settings.user_id!r} (the MCP server's environment): {text}"
                )
            else:
                problems.append(f"{parameter_names.get(field, field)}: {text}")
        listed = "; ".join(problems) or detail
        return ApiError(f"Invalid arguments: {listed}. Fix them and call the tool again.")
    if status == httpx.codes.TOO_MANY_REQUESTS:
        wait = response.headers.get("Retry-After")
        return ApiError(f"{detail}. Try again in {wait} s." if wait else f"{detail}.")
    return ApiError(f"The memory server answered {status}: {detail}.")


class Api:
    """The REST API as one user of one key. One HTTP client per server, kept for its
    connections (a tool call is then one request on an open socket)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.client = httpx.AsyncClient(
            base_url=settings.api_url,
            headers={"X-API-Key": settings.api_key, "Accept": "application/json"},
            timeout=TIMEOUT,
        )

    async def call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        parameter_names: Mapping[str, str] | None = None,
        if_user_unknown: Any = None,
    ) -> Any:
        """The API's JSON answer. ``if_user_unknown``: a read's answer when the API has no
        such end user (404), that is when nothing was stored for MIRIX_USER_ID yet."""
        query = {"user_id": self.settings.user_id}
        for name, value in (params or {}).items():
            if value is not None:
                query[name] = str(value).lower() if isinstance(value, bool) else value
        payload = None
        if body is not None:
            payload = {"user_id": self.settings.user_id} | {
                name: value for name, value in body.items() if value is not None
            }
            query = {}
        try:
            response = await self.client.request(method, path, params=query, json=payload)
        except httpx.TimeoutException as error:
            raise ApiError(
                f"The memory server at MIRIX_API_URL={self.settings.api_url} did not answer in "
                f"time ({type(error).__name__}); try again."
            ) from error
        except httpx.HTTPError as error:
            raise ApiError(
                f"Cannot reach the memory server at MIRIX_API_URL={self.settings.api_url} "
                f"({error or type(error).__name__}). Check that it is running and that "
                "MIRIX_API_URL points at it."
            ) from error
        if response.status_code == httpx.codes.NOT_FOUND and if_user_unknown is not None:
            return if_user_unknown
        if response.is_error:
            raise error_message(self.settings, response, parameter_names or {})
        try:
            return response.json()
        except ValueError as error:
            raise ApiError(
                f"MIRIX_API_URL={self.settings.api_url} answered {response.status_code} with "
                "something other than JSON: is it the memory server?"
            ) from error

    async def close(self) -> None:
        await self.client.aclose()


# What an agent reads of a retrieved skill.
SKILL_FIELDS = (
    "name",
    "description",
    "instructions",
    "pitfalls",
    "status",
    "confidence",
    "version",
    "why",
)


def experience_brief(experience: Mapping[str, Any]) -> dict[str, Any]:
    """An experience as an agent reads it: what was done, how it went, why, when."""
    return {
        name: experience[name]
        for name in EXPERIENCE_FIELDS
        if experience.get(name) not in (None, "", {}, [])
    }


def memory_brief(memory: Mapping[str, Any]) -> dict[str, Any]:
    return {
        name: value
        for name, value in memory.items()
        if name not in MEMORY_BOOKKEEPING and value not in (None, "", {}, [])
    }


def arguments_error(error: ValidationError) -> str:
    problems = []
    for problem in error.errors(include_url=False):
        where = ".".join(str(part) for part in problem["loc"]) or "arguments"
        sent = "" if problem["type"] == "missing" else f" (got {repr(problem['input'])[:80]})"
        problems.append(f"{where}: {problem['msg']}{sent}")
    return f"Invalid arguments: {'; '.join(problems)}. Fix them and call the tool again."


class MemoryServer(FastMCP):
    """FastMCP with tool errors an agent can act on, and results in few tokens.

    FastMCP reports a bad argument as a pydantic dump prefixed "Error executing tool", and an
    API error as its exception text under the same prefix; both come out as one sentence of
    what to fix. A result's text (what most clients show the model) is its structured content
    on one line: FastMCP indents it, a third more tokens on a list of experiences."""

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


INSTRUCTIONS = """\
Long-term memory of what worked. Before a task you may have done before, call recommend_action
with the task; if it recommends an action, consider it, and after acting call record_experience
with the outcome and the recommendation_id it gave. Record failures (record_failure) with the
reason, so that they are not repeated. recall_experiences finds past attempts at similar tasks;
search_memories searches what the user said in earlier conversations."""

READ_ONLY = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
# A record adds a row and never changes or removes one: not destructive, and not idempotent
# (the same call twice is two experiences).
RECORDS = ToolAnnotations(
    readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False
)

Task = Annotated[
    str, Field(description="The task in a sentence, as you would describe it to a colleague.")
]
Action = Annotated[str, Field(description="What was done: the approach, command or tool used.")]


def recorded(answer: Mapping[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "recorded": True,
        "experience": experience_brief(answer["experience"]),
    }
    if answer.get("warnings"):
        result["warnings"] = answer["warnings"]
    return result


def server_create(settings: Settings) -> MemoryServer:
    """The MCP server, its tools bound to ``settings``."""
    api = Api(settings)
    nothing_yet = f"Nothing is recorded for MIRIX_USER_ID={settings.user_id!r} yet."

    @asynccontextmanager
    async def lifespan(server: FastMCP) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await api.close()

    server = MemoryServer(
        "mirix", instructions=INSTRUCTIONS, lifespan=lifespan, log_level="WARNING"
    )

    @server.tool(annotations=READ_ONLY)
    async def recommend_action(
        *,
        task: Task,
        explore: Annotated[
            bool,
            Field(description="Sample among the promising actions instead of the best one."),
        ] = False,
    ) -> dict[str, Any]:
        """The action that has worked best for tasks like this one, with its confidence (the
        5% lower bound of its success rate: 0 to 1) and the successes and failures behind it.
        After acting, pass the recommendation_id to record_experience."""
        answer = await api.call(
            "GET",
            "/experiences/recommend",
            params={"task": task, "explore": explore},
            if_user_unknown={"found": False, "why": nothing_yet},
        )
        if not answer.get("found"):
            return {
                "found": False,
                "why": answer.get("why", ""),
                "next_step": "Choose an action yourself, then record how it went with "
                "record_experience, so the next recommendation can use it.",
            }
        return {
            "found": True,
            "action": answer["action"],
            "confidence": answer["confidence"],
            "counts": answer["counts"],
            "recommendation_id": answer["recommendation_id"],
            "why": answer.get("why", ""),
            "mode": answer.get("mode"),
            "runners_up": [
                {name: runner[name] for name in ("action", "confidence", "counts")}
                for runner in answer.get("runners_up", [])
            ],
            "next_step": "After trying it, call record_experience with the outcome and "
            f'recommendation_id="{answer["recommendation_id"]}".',
        }

    @server.tool(annotations=READ_ONLY)
    async def recall_experiences(
        *,
        query: Annotated[str, Field(description="What to look for: a task, action or error.")],
        k: Annotated[int, Field(description="How many experiences at most.")] = 5,
        outcome: Annotated[Outcome | None, Field(description="Only this outcome.")] = None,
    ) -> dict[str, Any]:
        """Past experiences (task, action, outcome, reason) most relevant to the query."""
        answer = await api.call(
            "GET",
            "/experiences/recall",
            params={"query": query, "k": k, "outcome": outcome},
            if_user_unknown={"results": []},
        )
        # Similarity to the query is known once the worker embedded the experience.
        results = [
            experience_brief(result)
            | ({"relevance": result["similarity"]} if result.get("similarity") is not None else {})
            for result in answer["results"]
        ]
        return {"query": query, "experiences": results, "count": len(results)}

    @server.tool(annotations=RECORDS)
    async def record_experience(
        *,
        task: Task,
        action: Action,
        outcome: Outcome,
        score: Annotated[
            float | None, Field(description="How well it went, 0 to 1, if you can tell.")
        ] = None,
        context: Annotated[
            dict[str, Any] | None,
            Field(description="Facts that may matter next time (language, repository, ...)."),
        ] = None,
        recommendation_id: Annotated[
            str | None,
            # An id is digits; an agent may well send it as a number.
            Field(
                description="The recommendation_id recommend_action gave, if you followed it.",
                coerce_numbers_to_str=True,
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Record how an action went for a task: success, failure or partial."""
        answer = await api.call(
            "POST",
            "/experiences",
            body={
                "task": task,
                "action": action,
                "outcome": outcome,
                "score": score,
                "context": context,
                "recommendation_id": recommendation_id,
            },
        )
        return recorded(answer)

    @server.tool(annotations=RECORDS)
    async def record_failure(
        *,
        task: Task,
        action: Action,
        reason: Annotated[str, Field(description="Why it failed: the error, or what was wrong.")],
    ) -> dict[str, Any]:
        """Record that an action failed for a task, and why, so that it is not repeated."""
        answer = await api.call(
            "POST",
            "/experiences/failure",
            body={"task": task, "action": action, "reason": reason},
        )
        return recorded(answer)

    @server.tool(annotations=READ_ONLY)
    async def recent_experiences(
        *,
        n: Annotated[int, Field(description="How many, newest first.")] = 10,
    ) -> dict[str, Any]:
        """The latest experiences recorded, newest first."""
        answer = await api.call(
            "GET",
            "/experiences/recent",
            params={"limit": n},
            parameter_names={"limit": "n"},
            if_user_unknown={"results": []},
        )
        results = [experience_brief(result) for result in answer["results"]]
        return {"experiences": results, "count": len(results)}

    @server.tool(annotations=READ_ONLY)
    async def memory_stats() -> dict[str, Any]:
        """How much is remembered: experiences by outcome and origin, how the recommendations
        that were followed turned out, and conversation memories by type."""
        experiences = await api.call(
            "GET", "/experiences/stats", if_user_unknown={"total": 0, "current": 0}
        )
        experiences.pop("success", None)
        # The smallest page: only the counts are wanted.
        components = await api.call(
            "GET", "/memory/components", params={"limit": 1}, if_user_unknown={"counts": {}}
        )
        return {
            "user_id": settings.user_id,
            "experiences": experiences,
            "memories": components["counts"],
        }

    @server.tool(annotations=READ_ONLY)
    async def search_memories(
        *,
        query: Annotated[
            str, Field(description="What to look for, in words; blank lists the newest.")
        ],
        memory_type: Annotated[
            MemoryType, Field(description="One type of memory, or all of them.")
        ] = "all",
        limit: Annotated[int, Field(description="How many memories at most, per type.")] = 10,
    ) -> dict[str, Any]:
        """Search what is remembered from the user's conversations (events, facts,
        procedures, links and files, stored values), best match first."""
        answer = await api.call(
            "GET",
            "/memory/search",
            params={"query": query, "memory_type": memory_type, "limit": limit},
            if_user_unknown={"results": []},
        )
        results = [memory_brief(result) for result in answer["results"]]
        return {"query": query, "memories": results, "count": len(results)}

    @server.tool(annotations=READ_ONLY)
    async def retrieve_skills(
        *,
        task: Annotated[str, Field(description="The task you are about to do, in words.")],
        limit: Annotated[int, Field(description="How many skills at most.")] = 3,
        session_id: Annotated[
            str | None,
            Field(
                description="The task session you record this work in, if any: its outcome "
                "then counts for the skills returned."
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Skills learned from earlier work that fit the task: when to use each, its steps and
        pitfalls, and how sure they are (the lower bound of their success rate)."""
        answer = await api.call(
            "POST",
            "/skills/retrieve",
            body={"task": task, "limit": limit, "session_id": session_id},
            if_user_unknown={"skills": []},
        )
        skills = [
            {name: skill[name] for name in SKILL_FIELDS if skill.get(name) not in (None, "", [])}
            for skill in answer["skills"]
        ]
        return {"task": task, "skills": skills, "count": len(skills)}

    return server


def main() -> None:
    try:
        settings = settings_from_environment(os.environ)
    except ConfigurationError as error:
        # Before any protocol traffic: the MCP client shows the server's stderr.
        sys.stderr.write(f"mirix-mcp: {error}\n")
        raise SystemExit(2) from None
    server_create(settings).run("stdio")
