"""The MCP server as an agent's client runs it: ``python -m mirix_site.mcp`` started over stdio
by the ``mcp`` client library, with only MIRIX_API_URL, MIRIX_API_KEY and MIRIX_USER_ID in its
environment, calling the real web server on the test database."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, Tool

from mirix_site.launcher import PROJECT_DIR
from tests import processes
from tests.factories import TenantFixture, memories_create, skill_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

READ_TOOLS = {
    "recommend_action",
    "recall_experiences",
    "recent_experiences",
    "memory_stats",
    "search_memories",
    "retrieve_skills",
}
WRITE_TOOLS = {"record_experience", "record_failure"}
CALL_TIMEOUT = timedelta(seconds=60)


class Agent:
    """An MCP client session on a started server, called from the (synchronous) test through
    a portal into the event loop the session runs in."""

    def __init__(self, portal: BlockingPortal, session: ClientSession) -> None:
        self.portal = portal
        self.session = session

    def tools(self) -> dict[str, Tool]:
        listed = self.portal.call(self.session.list_tools)
        return {tool.name: tool for tool in listed.tools}

    def call(self, tool: str, **arguments: Any) -> CallToolResult:
        return self.portal.call(self.session.call_tool, tool, arguments, CALL_TIMEOUT)

    def result(self, tool: str, **arguments: Any) -> dict[str, Any]:
        answer = self.call(tool, **arguments)
        assert not answer.isError, answer.content
        assert answer.structuredContent is not None
        # What most clients show the model: the same result, as JSON.
        assert json.loads(answer.content[0].text) == answer.structuredContent
        return answer.structuredContent

    def error(self, tool: str, **arguments: Any) -> str:
        answer = self.call(tool, **arguments)
        assert answer.isError, answer.structuredContent
        return " ".join(block.text for block in answer.content if block.type == "text")


@contextlib.contextmanager
def agent(url: str, key: str, log: Path, *, user_id: str = "sam") -> Iterator[Agent]:
    # Only these variables and the client library's safe defaults (PATH, HOME): no settings
    # module, no DATABASE_URL; the server must do with the API alone.
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mirix_site.mcp"],
        env={"MIRIX_API_URL": url, "MIRIX_API_KEY": key, "MIRIX_USER_ID": user_id},
        cwd=PROJECT_DIR,
    )
    with (
        log.open("w") as errors,
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(stdio_client(server, errlog=errors)) as streams,
        portal.wrap_async_context_manager(ClientSession(*streams)) as session,
    ):
        portal.call(session.initialize)
        yield Agent(portal, session)


@pytest.fixture(scope="module")
def web_url(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One web server for the module: each test's tenant is its own rows in the test
    database, which the server reads like any other."""
    with processes.web_server(tmp_path_factory.mktemp("web")) as web:
        yield web.url


def test_the_tools_are_listed_with_their_annotations_and_an_unreachable_api_is_named(
    tmp_path: Path,
) -> None:
    url = f"http://127.0.0.1:{processes.free_port()}"  # nothing listens there
    with agent(url, "mxk_unused_unused", tmp_path / "mcp.log") as client:
        tools = client.tools()
        assert set(tools) == READ_TOOLS | WRITE_TOOLS
        for name in READ_TOOLS:
            assert tools[name].annotations.readOnlyHint is True, name
        for name in WRITE_TOOLS:
            assert tools[name].annotations.readOnlyHint is False, name
            assert tools[name].annotations.destructiveHint is False, name
        assert tools["record_experience"].inputSchema["required"] == ["task", "action", "outcome"]

        message = client.error("search_memories", query="anything")
        assert f"MIRIX_API_URL={url}" in message
        assert "running" in message
        # Still up: the next call is answered, with the same advice.
        assert f"MIRIX_API_URL={url}" in client.error("memory_stats")


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        ({"MIRIX_USER_ID": "sam"}, "MIRIX_API_KEY is not set"),
        ({"MIRIX_API_KEY": "mxk_a_b"}, "MIRIX_USER_ID is not set"),
        (
            {"MIRIX_API_URL": "127.0.0.1:8531", "MIRIX_API_KEY": "mxk_a_b", "MIRIX_USER_ID": "sam"},
            "MIRIX_API_URL must be an http:// or https:// URL",
        ),
    ],
)
def test_the_console_script_refuses_to_start_without_its_settings_naming_the_variable(
    environment: dict[str, str], message: str
) -> None:
    finished = subprocess.run(  # noqa: S603 - our own program
        [str(Path(sys.executable).parent / "mirix-mcp")],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode == 2
    assert message in finished.stderr
    assert finished.stdout == ""  # nothing an MCP client would read as a message


def test_an_agent_records_what_it_did_and_is_recommended_what_worked(
    web_url: str, org: TenantFixture, tmp_path: Path
) -> None:
    task = "deploy the shop web app to staging"
    with agent(web_url, org.key, tmp_path / "mcp.log") as client:
        # A user nothing was recorded for yet: answers, not errors.
        nothing = client.result("recommend_action", task=task)
        assert nothing["found"] is False
        assert "record_experience" in nothing["next_step"]
        assert client.result("recall_experiences", query=task)["count"] == 0
        assert client.result("recent_experiences")["count"] == 0

        first = client.result(
            "record_experience",
            task=task,
            action="run make deploy-staging",
            outcome="success",
            score=0.9,
            context={"repository": "shop"},
        )
        assert first["recorded"] is True
        assert first["experience"]["outcome"] == "success"
        assert first["experience"]["context"] == {"repository": "shop"}
        client.result(
            "record_experience", task=task, action="run make deploy-staging", outcome="success"
        )
        failed = client.result(
            "record_failure",
            task=task,
            action="push to main and wait for CI",
            reason="CI only deploys production; staging never changed",
        )
        assert failed["experience"]["outcome"] == "failure"

        recommended = client.result("recommend_action", task=task)
        assert recommended["found"] is True
        assert recommended["action"] == "run make deploy-staging"
        # The 5% lower bound of Beta(0.5 + 2, 0.5 + 0): two successes, no failure.
        assert recommended["confidence"] == pytest.approx(0.4307, abs=1e-4)
        assert recommended["counts"]["success"] == 2
        assert recommended["counts"]["failure"] == 0
        recommendation_id = recommended["recommendation_id"]
        assert recommendation_id in recommended["next_step"]
        # The action that only failed is never the one recommended.
        assert "push to main" not in recommended["action"]

        followed = client.result(
            "record_experience",
            task=task,
            action=recommended["action"],
            outcome="success",
            recommendation_id=int(recommendation_id),  # an id sent as a number is taken too
        )
        assert followed["experience"]["recommendation_id"] == recommendation_id

        failures = client.result("recall_experiences", query="deploy staging", outcome="failure")
        assert [found["action"] for found in failures["experiences"]] == [
            "push to main and wait for CI"
        ]
        assert "staging never changed" in failures["experiences"][0]["reason"]
        recalled = client.result("recall_experiences", query="deploy to staging", k=2)
        assert recalled["count"] == 2
        assert {found["outcome"] for found in recalled["experiences"]} <= {"success", "failure"}

        recent = client.result("recent_experiences", n=2)["experiences"]
        assert [experience["id"] for experience in recent] == [
            followed["experience"]["id"],
            failed["experience"]["id"],
        ]

        stats = client.result("memory_stats")
        assert stats["user_id"] == "sam"
        assert stats["experiences"]["total"] == 4
        assert stats["experiences"]["by_outcome"] == {"success": 3, "failure": 1, "partial": 0}
        assert stats["experiences"]["recommendations"]["issued"] == 1
        assert stats["experiences"]["recommendations"]["followed"] == 1


def test_an_agent_searches_the_conversation_memories_stored_for_its_user(
    web_url: str, org: TenantFixture, tmp_path: Path
) -> None:
    with agent(web_url, org.key, tmp_path / "mcp.log") as client:
        # A user nothing was stored for yet: empty answers, not errors.
        assert client.result("search_memories", query="draft")["count"] == 0
        assert client.result("memory_stats")["memories"] == {}

        memories_create(org, user_id="sam")
        found = client.result("search_memories", query="where is the draft", limit=5)
        assert found["count"] >= 1
        texts = [str(memory) for memory in found["memories"]]
        assert any("https://example.com/draft" in text for text in texts), texts
        # What an agent does not need is left out.
        assert not {"client_id", "source_message_ids", "ranks"} & set(found["memories"][0])

        resources = client.result("search_memories", query="draft", memory_type="resource")
        assert {memory["memory_type"] for memory in resources["memories"]} == {"resource"}

        counts = client.result("memory_stats")["memories"]
        assert counts["episodic"] >= 1
        assert counts["semantic"] == 1
        assert counts["procedural"] == 1


def test_an_agent_retrieves_the_skills_learned_for_its_user(
    web_url: str, org: TenantFixture, tmp_path: Path
) -> None:
    with agent(web_url, org.key, tmp_path / "mcp.log") as client:
        assert client.result("retrieve_skills", task="load a csv file")["count"] == 0
        skill_create(org, user_id="sam")
        found = client.result("retrieve_skills", task="load a csv file with odd characters")
        [skill] = found["skills"]
        assert skill["name"] == "read-csv-files" and "latin-1" in skill["instructions"]
        assert skill["status"] == "candidate" and "confidence" in skill


def test_a_wrong_key_is_a_tool_error_naming_the_key_and_the_server_keeps_answering(
    web_url: str, org: TenantFixture, tmp_path: Path
) -> None:
    with agent(web_url, "mxk_nosuchkey_0123456789abcdef", tmp_path / "mcp.log") as client:
        message = client.error("search_memories", query="draft")
        assert "MIRIX_API_KEY" in message
        assert "401" in message
        assert "mxk_nosuchkey" not in message  # a key is never echoed
        assert "MIRIX_API_KEY" in client.error("record_failure", task="t", action="a", reason="r")
        assert len(client.tools()) == len(READ_TOOLS | WRITE_TOOLS)


def test_a_bad_argument_is_answered_with_what_to_fix(
    web_url: str, org: TenantFixture, tmp_path: Path
) -> None:
    with agent(web_url, org.key, tmp_path / "mcp.log") as client:
        # Refused by the tool's own schema.
        message = client.error("record_experience", task="t", action="a", outcome="maybe")
        assert "outcome" in message
        assert "'success', 'failure' or 'partial'" in message
        assert "'maybe'" in message
        message = client.error("record_failure", task="t", action="a")
        assert "reason: Field required" in message
        # Refused by the API: its fields, under the tool's parameter names.
        message = client.error("search_memories", query="draft", limit=1000)
        assert message.startswith("Invalid arguments: limit:"), message
        assert "100" in message
        client.result("record_failure", task="t", action="a", reason="r")
        message = client.error("recent_experiences", n=0)  # the API's limit
        assert message.startswith("Invalid arguments: n:"), message


def test_a_read_only_key_reads_and_is_told_to_use_a_read_write_key_to_record(
    web_url: str, org: TenantFixture, tmp_path: Path
) -> None:
    _, read_only_key = org.new_key(read_only=True)
    with agent(web_url, read_only_key, tmp_path / "mcp.log") as client:
        assert client.result("search_memories", query="draft")["count"] == 0
        message = client.error(
            "record_experience", task="t", action="a", outcome="success", score=1.0
        )
        assert "read-only" in message
        assert "read-write MIRIX_API_KEY" in message


def test_the_tools_choices_are_the_apis(web_url: str, org: TenantFixture, tmp_path: Path) -> None:
    schema = requests.get(
        f"{web_url}/api/schema/",
        params={"format": "json"},
        headers={"X-API-Key": org.key},
        timeout=60,
    ).json()

    def api_choices(path: str, parameter: str) -> set[str]:
        parameters = schema["paths"][path]["get"]["parameters"]
        found = next(each for each in parameters if each["name"] == parameter)
        return set(found["schema"]["enum"]) - {None}

    with agent(web_url, org.key, tmp_path / "mcp.log") as client:
        tools = client.tools()
    memory_types = tools["search_memories"].inputSchema["properties"]["memory_type"]["enum"]
    # The API also takes the aliases the MIRIX client sends; an agent is offered the names.
    aliases = {"knowledge", "knowledge_vault_memory"}
    assert set(memory_types) == api_choices("/memory/search", "memory_type") - aliases
    outcomes = tools["record_experience"].inputSchema["properties"]["outcome"]["enum"]
    assert set(outcomes) == api_choices("/experiences/recall", "outcome")
