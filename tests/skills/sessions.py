"""Task sessions as an agent sends them, for the skill-learning tests: a request, a tool call
that fails, the fix that works, the user's verdict."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client as HttpClient

CSV_TASKS = (
    "Load the sales export sales.csv into a dataframe.",
    "Read customers.csv and count the rows.",
    "Parse the CSV file orders.csv and sum the totals.",
    "Open inventory.csv and list the columns.",
    "Import the CSV export refunds.csv and show the first rows.",
    "Read the legacy CSV file suppliers.csv.",
    "Load payroll.csv for the monthly report.",
)

# A task of the CSV sessions' kind that no session had.
NEW_TASK = "Load the quarterly CSV export q3.csv into a table."


def tool_turns(
    tool: str, arguments: dict[str, Any], result: str, call_id: str
) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": tool, "arguments": json.dumps(arguments)},
                }
            ],
        },
        {"role": "tool", "name": tool, "tool_call_id": call_id, "content": result},
    ]


def csv_session(task: str, *, verdict: str = "Thanks, that works now.") -> list[dict[str, Any]]:
    """The agent's first read fails on the file's encoding; reading it as latin-1 works."""
    name = next((word.rstrip(".") for word in task.split() if ".csv" in word), "data.csv")
    return [
        {"role": "user", "content": task},
        *tool_turns(
            "read_csv",
            {"path": name},
            "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9 in position 12",
            "call-1",
        ),
        *tool_turns(
            "read_csv_latin1",
            {"path": name, "encoding": "latin-1"},
            "Loaded 120 rows, 6 columns.",
            "call-2",
        ),
        {"role": "assistant", "content": f"Read {name} with the latin-1 encoding: 120 rows."},
        {"role": "user", "content": verdict},
    ]


def session_send(
    api: HttpClient,
    session_id: str,
    messages: list[dict[str, Any]],
    *,
    user_id: str = "agent-user",
    close: bool = True,
    tools: list[dict[str, Any]] | None = None,
) -> None:
    response = api.post(
        "/memory/add",
        {
            "user_id": user_id,
            "session_id": session_id,
            "session_tag": "task",
            "messages": messages,
            **({"tools": tools} if tools is not None else {}),
        },
        format="json",
    )
    assert response.status_code == 202, response.content
    if close:
        closed = api.post(f"/sessions/{session_id}/close", {"user_id": user_id}, format="json")
        assert closed.status_code == 200, closed.content
