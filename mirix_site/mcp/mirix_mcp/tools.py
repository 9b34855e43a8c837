"""The tools, in three groups, each registered on a server by one function: what was tried
and how it went (experiences), what the user said (conversation memory), and an agent's own
work as task sessions with the skills learned from them. Each tool's docstring is what an agent
reads: what it does and when to call it."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from mirix_mcp.api import Api, ApiError
from mirix_mcp.skills import skill_uri

# The API's choices, repeated here so that an agent reads them in the tools' schemas;
# tests/test_mcp.py checks them against the live server's OpenAPI schema.
Outcome = Literal["success", "failure", "partial"]
MemoryType = Literal["all", "episodic", "semantic", "procedural", "resource", "knowledge_vault"]
ForgettableType = Literal[
    "episodic", "semantic", "procedural", "resource", "knowledge_vault", "experience"
]

# Bookkeeping fields of the API's answers that an agent has no use for; dropped to keep tool
# results short (an agent pays for every token it reads).
MEMORY_BOOKKEEPING = frozenset(
    {
        "user_id",
        "client_id",
        "filter_tags",
        "turn_tags",
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


READ_ONLY = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
# A record adds rows and never changes or removes one: not destructive, and not idempotent
# (the same call twice is two records).
RECORDS = ToolAnnotations(
    readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False
)
# Changes a row (supersede) or ends a session: the same call again changes nothing more.
CHANGES = ToolAnnotations(
    readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False
)
DELETES = ToolAnnotations(
    readOnlyHint=False, destructiveHint=True, idempotentHint=True, openWorldHint=False
)

Task = Annotated[
    str, Field(description="The task in a sentence, as you would describe it to a colleague.")
]
Action = Annotated[str, Field(description="What was done: the approach, command or tool used.")]
SessionId = Annotated[str, Field(description="The session_id start_task gave.")]


def tool(server: MCPServer, annotations: ToolAnnotations) -> Callable[[Any], Any]:
    """Registers a tool, its docstring (what it does and when to call it) as one paragraph:
    the indentation of source code is tokens an agent would pay for."""

    def register(function: Any) -> Any:
        description = " ".join((function.__doc__ or "").split())
        return server.tool(annotations=annotations, description=description)(function)

    return register


def recorded(answer: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "recorded": True,
        "experience": experience_brief(answer["experience"]),
    }
    if answer.get("warnings"):
        result["warnings"] = answer["warnings"]
    return result


class Turn(BaseModel):
    role: Literal["user", "assistant", "system"]
    content: str = Field(description="What was said.")


class ToolCall(BaseModel):
    name: str = Field(description="The tool's name.")
    arguments: dict[str, Any] | str = Field(
        default_factory=dict, description="The arguments it was called with."
    )


class ToolResult(BaseModel):
    content: str = Field(description="What the tool returned, or its error message.")
    tool: str | None = Field(
        default=None,
        description="The tool's name; needed when the call is not logged in the same step.",
    )
    is_error: bool = Field(default=False, description="True when the tool call failed.")


class StepMessage(BaseModel):
    role: Literal["assistant", "user"]
    content: str = Field(description="What you (assistant) or the user said.")


# Words the learner reads as a tool's failure (skills/learning/distill.py): a result flagged
# as an error without any of them is stored with "Error: " before it.
_ERROR_WORDS = re.compile(
    r"error|exception|traceback|fail|fatal|not found|denied|refused|rejected|timed? ?out|"
    r"cannot|can't|unable|unauthorized|forbidden",
    re.I,
)


def step_turns(
    tool_call: ToolCall | None, tool_result: ToolResult | None, message: StepMessage | None
) -> list[dict[str, Any]]:
    """The turns of one logged step, in the shape of the chat APIs (the call's result paired
    with it by id when both come in one step, else by the tool's name)."""
    if tool_call is None and tool_result is None and message is None:
        raise ApiError(
            "Invalid arguments: give a tool_call, a tool_result or a message (or a tool_call "
            "with its tool_result). Fix them and call the tool again."
        )
    if tool_result is not None and tool_call is None and not tool_result.tool:
        raise ApiError(
            "Invalid arguments: tool_result.tool: name the tool whose result this is, or log "
            "the result with its tool_call in one step. Fix them and call the tool again."
        )
    turns: list[dict[str, Any]] = []
    if message is not None:
        turns.append({"role": message.role, "content": message.content})
    call_id = ""
    if tool_call is not None:
        call_id = f"call_{uuid.uuid4().hex[:16]}"
        arguments = tool_call.arguments
        turns.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": tool_call.name,
                            "arguments": (
                                arguments if isinstance(arguments, str) else json.dumps(arguments)
                            ),
                        },
                    }
                ],
            }
        )
    if tool_result is not None:
        content = tool_result.content
        if tool_result.is_error and not _ERROR_WORDS.search(content):
            content = f"Error: {content}"
        turns.append(
            {
                "role": "tool",
                "tool_call_id": call_id,
                "name": tool_result.tool or (tool_call.name if tool_call else ""),
                "content": content,
            }
        )
    return turns


def experience_tools(server: MCPServer, api: Callable[[], Api]) -> None:
    """What was tried for a task and how it went (as Mimir keeps it): recommend, recall,
    record, supersede."""

    def nothing_yet() -> str:
        return f"Nothing is recorded for this user ({api().settings.user_id!r}) yet."

    @tool(server, READ_ONLY)
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
        answer = await api().call(
            "GET",
            "/experiences/recommend",
            params={"task": task, "explore": explore},
            if_missing={"found": False, "why": nothing_yet()},
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

    @tool(server, READ_ONLY)
    async def recall_experiences(
        *,
        query: Annotated[str, Field(description="What to look for: a task, action or error.")],
        k: Annotated[int, Field(description="How many experiences at most.")] = 5,
        outcome: Annotated[Outcome | None, Field(description="Only this outcome.")] = None,
    ) -> dict[str, Any]:
        """Past experiences (task, action, outcome, reason) most relevant to the query."""
        answer = await api().call(
            "GET",
            "/experiences/recall",
            params={"query": query, "k": k, "outcome": outcome},
            if_missing={"results": []},
        )
        # Similarity to the query is known once the worker embedded the experience.
        results = [
            experience_brief(result)
            | ({"relevance": result["similarity"]} if result.get("similarity") is not None else {})
            for result in answer["results"]
        ]
        return {"query": query, "experiences": results, "count": len(results)}

    @tool(server, RECORDS)
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
        answer = await api().call(
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

    @tool(server, RECORDS)
    async def record_failure(
        *,
        task: Task,
        action: Action,
        reason: Annotated[str, Field(description="Why it failed: the error, or what was wrong.")],
    ) -> dict[str, Any]:
        """Record that an action failed for a task, and why, so that it is not repeated."""
        answer = await api().call(
            "POST",
            "/experiences/failure",
            body={"task": task, "action": action, "reason": reason},
        )
        return recorded(answer)

    @tool(server, READ_ONLY)
    async def recent_experiences(
        *,
        n: Annotated[int, Field(description="How many, newest first.")] = 10,
    ) -> dict[str, Any]:
        """The latest experiences recorded, newest first."""
        answer = await api().call(
            "GET",
            "/experiences/recent",
            params={"limit": n},
            parameter_names={"limit": "n"},
            if_missing={"results": []},
        )
        results = [experience_brief(result) for result in answer["results"]]
        return {"experiences": results, "count": len(results)}

    @tool(server, CHANGES)
    async def supersede_experience(
        *,
        experience_id: Annotated[
            str,
            Field(description="The experience that is out of date.", coerce_numbers_to_str=True),
        ],
        by: Annotated[
            str,
            Field(description="The experience that replaces it.", coerce_numbers_to_str=True),
        ],
    ) -> dict[str, Any]:
        """Mark an experience as replaced by a newer one (recorded with record_experience),
        when what was learned changed; the old one is kept but no longer recommended."""
        answer = await api().call(
            "POST", f"/experiences/{experience_id}/supersede", body={"by": by}
        )
        return {"superseded": True, "experience": experience_brief(answer)}


def memory_tools(server: MCPServer, api: Callable[[], Api]) -> None:
    """What the user said in conversations: keep it, search it, forget a piece of it."""

    @tool(server, READ_ONLY)
    async def memory_stats() -> dict[str, Any]:
        """How much is remembered: experiences by outcome and origin, how the recommendations
        that were followed turned out, and conversation memories by type."""
        experiences = await api().call(
            "GET", "/experiences/stats", if_missing={"total": 0, "current": 0}
        )
        experiences.pop("success", None)
        # The smallest page: only the counts are wanted.
        components = await api().call(
            "GET", "/memory/components", params={"limit": 1}, if_missing={"counts": {}}
        )
        return {
            "user_id": api().settings.user_id,
            "experiences": experiences,
            "memories": components["counts"],
        }

    @tool(server, READ_ONLY)
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
        answer = await api().call(
            "GET",
            "/memory/search",
            params={"query": query, "memory_type": memory_type, "limit": limit},
            if_missing={"results": []},
        )
        results = [memory_brief(result) for result in answer["results"]]
        return {"query": query, "memories": results, "count": len(results)}

    @tool(server, RECORDS)
    async def remember(
        *,
        text: Annotated[str, Field(description="What was said, in the speaker's words.")],
        role: Annotated[Literal["user", "assistant"], Field(description="Who said it.")] = "user",
    ) -> dict[str, Any]:
        """Keep something the user told you (a fact, a preference, a plan) for later
        conversations. Call it when the user says something worth remembering."""
        answer = await api().add(
            {"messages": [{"role": role, "content": text}]},
            parameter_names={"messages.0.content": "text", "messages.0.role": "role"},
        )
        return {
            "stored": True,
            "message_ids": answer.get("message_ids", []),
            "note": "Memories are extracted in the background within seconds; "
            "search_memories finds them then.",
        }

    @tool(server, RECORDS)
    async def add_conversation(
        *,
        messages: Annotated[
            list[Turn], Field(description="The turns in order, oldest first.", min_length=1)
        ],
    ) -> dict[str, Any]:
        """Keep a stretch of conversation (several turns at once) for later conversations.
        Call it at the end of a conversation, or instead of remember for many turns."""
        answer = await api().add(
            {"messages": [turn.model_dump() for turn in messages]},
        )
        return {
            "stored": True,
            "message_ids": answer.get("message_ids", []),
            "note": "Memories are extracted in the background within seconds.",
        }

    @tool(server, DELETES)
    async def forget(
        *,
        memory_type: Annotated[
            ForgettableType, Field(description="The type of what to forget (as found).")
        ],
        id: Annotated[
            str,
            Field(
                description="Its id, as search_memories or an experience gave it.",
                coerce_numbers_to_str=True,
            ),
        ],
    ) -> dict[str, Any]:
        """Delete one memory or experience you stored, for good. Call it when the user asks
        you to forget something, after finding it with search_memories or recall_experiences."""
        path = (
            f"/experiences/{id}" if memory_type == "experience" else f"/memory/{memory_type}/{id}"
        )
        gone = await api().call("DELETE", path, if_missing={"missing": True})
        if gone.get("missing"):
            raise ApiError(
                f"No {memory_type} memory with id {id} of this user (already forgotten, or "
                "not stored by this key's application): nothing was deleted."
            )
        return {"forgotten": True, "memory_type": memory_type, "id": id}


def task_tools(server: MCPServer, api: Callable[[], Api]) -> None:
    """An agent's own work as task sessions, and the skills learned from them."""

    @tool(server, RECORDS)
    async def start_task(
        *,
        task: Task,
        tools: Annotated[
            dict[str, str] | None,
            Field(description="The tools you have for it: name -> what it does."),
        ] = None,
    ) -> dict[str, Any]:
        """Open a task session for a piece of work, so that how it went teaches skills. Call
        it before starting a multi-step task; then log_step each tool call, and finish_task."""
        session_id = f"task-{uuid.uuid4().hex[:20]}"
        declared = [
            {"name": name, "description": description, "input_schema": {"type": "object"}}
            for name, description in (tools or {}).items()
        ]
        await api().add(
            {
                "session_id": session_id,
                "session_tag": "task",
                "messages": [{"role": "user", "content": task}],
                "tools": declared or None,
            },
            parameter_names={"messages.0.content": "task"},
        )
        return {
            "session_id": session_id,
            "next_step": "Call retrieve_skills with the task and this session_id for what "
            "worked before; log_step each tool call with its result; finish_task at the end.",
        }

    @tool(server, RECORDS)
    async def log_step(
        *,
        session_id: SessionId,
        tool_call: Annotated[
            ToolCall | None, Field(description="A tool you called, with its arguments.")
        ] = None,
        tool_result: Annotated[
            ToolResult | None,
            Field(description="What it returned (is_error true when it failed)."),
        ] = None,
        message: Annotated[
            StepMessage | None, Field(description="Something you or the user said.")
        ] = None,
    ) -> dict[str, Any]:
        """Record one step of a task session: a tool call and its result (one call of this
        tool for both), or a message. Log failed calls too: the fix that followed is a lesson."""
        turns = step_turns(tool_call, tool_result, message)
        answer = await api().add(
            {"session_id": session_id, "session_tag": "task", "messages": turns},
        )
        return {"logged": len(turns), "message_ids": answer.get("message_ids", [])}

    @tool(server, CHANGES)
    async def finish_task(
        *,
        session_id: SessionId,
        outcome: Annotated[Outcome, Field(description="How the task went.")],
        note: Annotated[
            str | None, Field(description="What made it work or fail, in a sentence or two.")
        ] = None,
    ) -> dict[str, Any]:
        """Close a task session with how it went. Call it when the task is done or abandoned;
        finished sessions are learned from in batches, and retrieve_skills finds the skills."""
        answer = await api().call(
            "POST",
            f"/sessions/{session_id}/close",
            body={"outcome": outcome, "note": note},
        )
        return {
            "finished": True,
            "session_id": session_id,
            "outcome": answer.get("outcome", outcome),
            "next_step": "The server learns from finished task sessions in batches; the skills "
            "it learns come back from retrieve_skills and as skill:// resources.",
        }

    @tool(server, READ_ONLY)
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
        answer = await api().call(
            "POST",
            "/skills/retrieve",
            body={"task": task, "limit": limit, "session_id": session_id},
            if_missing={"skills": []},
        )
        skills = [
            {name: skill[name] for name in SKILL_FIELDS if skill.get(name) not in (None, "", [])}
            for skill in answer["skills"]
        ]
        return {"task": task, "skills": skills, "count": len(skills)}

    @tool(server, READ_ONLY)
    async def list_skills() -> dict[str, Any]:
        """The skills learned for this user, with their status and confidence, and the
        skill:// resource holding each one's SKILL.md."""
        answer = await api().call(
            "GET", "/skills", params={"limit": 100}, if_missing={"results": []}
        )
        user_id = api().settings.user_id
        skills = [
            {
                name: skill[name]
                for name in ("name", "description", "status", "confidence", "version")
                if skill.get(name) not in (None, "")
            }
            | {"uri": skill_uri(user_id, skill["name"])}
            for skill in answer["results"]
        ]
        return {"skills": skills, "count": len(skills)}
