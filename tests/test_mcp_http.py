"""``/mcp`` as an HTTP endpoint: who it acts for, what it refuses and how, and that a tool's
call is the API's own (its checks, its rows), in process. The MCP sessions themselves, over
a real server and the client library, are in tests/test_mcp.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from accounts.models import EndUser
from mirix_site.search.models import RetrievalLog
from sessions.models import Message
from tests.factories import TenantFixture

MESSAGE = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}


def rpc(org: TenantFixture, method: str, params: dict[str, Any] | None = None, **extra: Any):
    message = {"jsonrpc": "2.0", "id": 1, "method": method} | (
        {"params": params} if params is not None else {}
    )
    return org.api.post("/mcp?user_id=sam", message, format="json", **extra)


def tool_result(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.content
    result = response.json()["result"]
    assert result["isError"] is False, result
    return result["structuredContent"]


@pytest.mark.django_db
def test_the_user_is_named_by_header_or_url_and_must_be_well_formed(org: TenantFixture) -> None:
    by_url = org.api.post("/mcp?user_id=sam", MESSAGE, format="json")
    assert by_url.status_code == 200
    assert by_url.json()["id"] == 7 and by_url.json()["result"]["tools"]
    by_header = org.api.post("/mcp", MESSAGE, format="json", HTTP_X_USER_ID="sam")
    assert by_header.json() == by_url.json()
    for path in ("/mcp", "/mcp?user_id=a/b", "/mcp?user_id=%20sam"):
        refused = org.api.post(path, MESSAGE, format="json")
        assert refused.status_code == 422, path
        assert set(refused.json()["fields"]) == {"user_id"}
    # Listing reads nothing and creates no user.
    assert not EndUser.objects.exists()


@pytest.mark.django_db
def test_what_is_not_an_mcp_message_is_refused_in_the_apis_error_shape(
    org: TenantFixture,
) -> None:
    refused = org.api.post("/mcp?user_id=sam", {"hello": "world"}, format="json")
    assert refused.status_code == 400
    body = refused.json()
    assert body["code"] == "invalid_mcp_message"
    assert body["detail"].startswith("Not an MCP request this endpoint serves")
    assert "Traceback" not in refused.content.decode()
    not_json = org.api.generic("POST", "/mcp?user_id=sam", b"{", content_type="application/json")
    assert not_json.status_code == 400 and not_json.json()["code"] == "parse_error"
    # No stream for the server's own messages and no session to end: the transport allows 405.
    for method in ("get", "delete"):
        answer = getattr(org.api, method)("/mcp?user_id=sam")
        assert answer.status_code == 405
        assert answer.json()["code"] == "method_not_allowed"
    # An unknown method is the protocol's own error, for the MCP client.
    unknown = rpc(org, "skills/teleport")
    assert unknown.status_code == 200 and unknown.json()["error"]["code"] < 0


@pytest.mark.django_db
def test_a_tool_call_is_the_apis_own_in_process(org: TenantFixture) -> None:
    stored = tool_result(rpc(org, "tools/call", {"name": "remember", "arguments": {"text": "hi"}}))
    assert stored["stored"] is True
    # The API stored it for the user the URL named, as this key's application.
    [message] = Message.objects.all()
    assert message.pk == int(stored["message_ids"][0])
    assert (message.role, message.text) == ("user", "hi")
    assert message.session.end_user.user_id == "sam"
    assert message.session.end_user.organization == org.organization
    assert message.session.client == org.client
    # Its validation: a bad argument is the tool's error, naming the parameter.
    bad = rpc(
        org, "tools/call", {"name": "search_memories", "arguments": {"query": "x", "limit": 0}}
    )
    result = bad.json()["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith("Invalid arguments: limit:")
    # A step of a task that was never started: the API's answer, in the tool's words.
    missing = rpc(
        org,
        "tools/call",
        {"name": "finish_task", "arguments": {"session_id": "nope", "outcome": "success"}},
    )
    assert missing.json()["result"]["isError"] is True
    assert "404" in json.dumps(missing.json())


@pytest.mark.django_db
def test_a_search_through_a_tool_is_logged_once_the_mcp_answer_is_sent(org: TenantFixture) -> None:
    # The tool's request is served inside /mcp's: its log row waits for the outer answer, which
    # the test client closes before returning it.
    tool_result(rpc(org, "tools/call", {"name": "remember", "arguments": {"text": "I drink tea"}}))
    found = tool_result(
        rpc(org, "tools/call", {"name": "search_memories", "arguments": {"query": "tea"}})
    )
    assert found["query"] == "tea"
    [row] = RetrievalLog.objects.all()
    assert (row.endpoint, row.query, row.end_user.user_id) == ("memory/search", "tea", "sam")
    assert row.client == org.client


@pytest.mark.django_db
def test_a_task_worked_through_the_tools_is_a_task_session_with_its_stated_outcome(
    org: TenantFixture,
) -> None:
    def call(name: str, **arguments: Any) -> dict[str, Any]:
        return tool_result(rpc(org, "tools/call", {"name": name, "arguments": arguments}))

    session_id = call("start_task", task="rotate the staging TLS certificate")["session_id"]
    call(
        "log_step",
        session_id=session_id,
        tool_call={"name": "certbot", "arguments": {"domain": "staging.example.com"}},
        tool_result={"content": "challenge did not validate", "is_error": True},
    )
    call(
        "log_step",
        session_id=session_id,
        tool_result={"tool": "certbot", "content": "certificate renewed"},
    )
    call("finish_task", session_id=session_id, outcome="failure", note="DNS not propagated")

    session = org.api.get(f"/sessions/{session_id}", {"user_id": "sam"}).json()
    assert session["tag"] == "task" and session["status"] == "closed"
    assert (session["outcome"], session["note"]) == ("failure", "DNS not propagated")
    turns = org.api.get(f"/sessions/{session_id}/messages", {"user_id": "sam"}).json()["results"]
    assert [turn["role"] for turn in turns] == ["user", "assistant", "tool", "tool"]
    call_id = turns[1]["tool_calls"][0]["id"]
    assert turns[2]["tool_call_id"] == call_id  # a call and its result in one step, paired
    # A result flagged as an error, without an error word, reads as one to the learner.
    assert turns[2]["content"][0]["text"] == "Error: challenge did not validate"
    assert turns[3]["name"] == "certbot"  # a result alone, paired by its tool
    # Closed with an outcome: another one is refused, with the API's reason.
    again = rpc(
        org,
        "tools/call",
        {"name": "finish_task", "arguments": {"session_id": session_id, "outcome": "success"}},
    ).json()["result"]
    assert again["isError"] is True and "409" in again["content"][0]["text"]
