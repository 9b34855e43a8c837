"""The MCP server as an agent's client runs it: ``mirix-mcp`` (the light package,
``mirix_site/mcp``) started over stdio by the ``mcp`` client library with only MIRIX_API_URL,
MIRIX_API_KEY and MIRIX_USER_ID in its environment, and the server's own ``/mcp`` over
streamable HTTP, both calling the real web server on the test database."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import requests
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError as McpError
from mcp.types import CallToolResult, Tool

from accounts.services import api_key_revoke
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
    "list_skills",
}
WRITE_TOOLS = {
    "record_experience",
    "record_failure",
    "supersede_experience",
    "remember",
    "add_conversation",
    "forget",
    "start_task",
    "log_step",
    "finish_task",
}
CALL_TIMEOUT = 60.0  # seconds
MIRIX_MCP = str(Path(sys.executable).parent / "mirix-mcp")


class Agent:
    """An MCP client session on a started server, called from the (synchronous) test through
    a portal into the event loop the session runs in."""

    def __init__(self, portal: BlockingPortal, session: ClientSession, notified: list[str]) -> None:
        self.portal = portal
        self.session = session
        self.notified = notified  # the methods of the server's notifications, as they came

    def tools(self) -> dict[str, Tool]:
        listed = self.portal.call(self.session.list_tools)
        return {tool.name: tool for tool in listed.tools}

    def call(self, tool: str, **arguments: Any) -> CallToolResult:
        return self.portal.call(self.session.call_tool, tool, arguments, CALL_TIMEOUT)

    def result(self, tool: str, **arguments: Any) -> dict[str, Any]:
        answer = self.call(tool, **arguments)
        assert not answer.is_error, answer.content
        assert answer.structured_content is not None
        # What most clients show the model: the same result, as JSON.
        assert json.loads(answer.content[0].text) == answer.structured_content
        return answer.structured_content

    def error(self, tool: str, **arguments: Any) -> str:
        answer = self.call(tool, **arguments)
        assert answer.is_error, answer.structured_content
        return " ".join(block.text for block in answer.content if block.type == "text")

    def resources(self) -> dict[str, Any]:
        listed = self.portal.call(self.session.list_resources)
        return {str(resource.uri): resource for resource in listed.resources}

    def read(self, uri: str) -> str:
        answer = self.portal.call(self.session.read_resource, uri)
        [contents] = answer.contents
        return contents.text


@contextlib.contextmanager
def _session(portal: BlockingPortal, streams: Any) -> Iterator[Agent]:
    notified: list[str] = []

    async def on_message(message: Any) -> None:
        method = getattr(message, "method", None)
        if isinstance(method, str):
            notified.append(method)

    with portal.wrap_async_context_manager(
        ClientSession(*streams[:2], message_handler=on_message)
    ) as session:
        initialized = portal.call(session.initialize)
        # The protocol revision today's editors speak (2025-11-25) has no `extensions`.
        assert initialized.protocol_version == "2025-11-25"
        assert "io.modelcontextprotocol/skills" in (initialized.capabilities.experimental or {})
        yield Agent(portal, session, notified)


@contextlib.contextmanager
def agent(
    url: str, key: str, log: Path, *, user_id: str = "sam", **environment: str
) -> Iterator[Agent]:
    # Only these variables and the client library's safe defaults (PATH, HOME): no settings
    # module, no DATABASE_URL; the server must do with the API alone.
    server = StdioServerParameters(
        command=MIRIX_MCP,
        env={"MIRIX_API_URL": url, "MIRIX_API_KEY": key, "MIRIX_USER_ID": user_id} | environment,
        cwd=PROJECT_DIR,
    )
    with (
        log.open("w") as errors,
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(stdio_client(server, errlog=errors)) as streams,
        _session(portal, streams) as client,
    ):
        yield client


@contextlib.contextmanager
def http_agent(url: str, key: str, *, user_id: str = "sam") -> Iterator[Agent]:
    """The server's own /mcp, as an editor configured with its URL and key would reach it."""
    with start_blocking_portal() as portal:
        http = httpx2.AsyncClient(
            headers={"X-API-Key": key, "X-User-Id": user_id}, timeout=httpx2.Timeout(60.0)
        )
        with (
            portal.wrap_async_context_manager(http),
            portal.wrap_async_context_manager(
                streamable_http_client(f"{url}/mcp", http_client=http)
            ) as streams,
            _session(portal, streams) as client,
        ):
            yield client


def eventually(check: Callable[[], Any], *, seconds: float = 60, what: str = "") -> Any:
    """``check()``'s first true answer, asked again until the worker has done its part."""
    deadline = time.monotonic() + seconds
    while True:
        answer = check()
        if answer:
            return answer
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def web_url(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One web server for the module: each test's tenant is its own rows in the test
    database, which the server reads like any other."""
    with processes.web_server(tmp_path_factory.mktemp("web"), workers=2) as web:
        yield web.url


def test_the_tools_are_listed_with_their_annotations(
    web_url: str, org: TenantFixture, tmp_path: Path
) -> None:
    with agent(web_url, org.key, tmp_path / "mcp.log") as client:
        tools = client.tools()
    assert set(tools) == READ_TOOLS | WRITE_TOOLS
    for name in READ_TOOLS:
        assert tools[name].annotations.read_only_hint is True, name
    for name in WRITE_TOOLS:
        assert tools[name].annotations.read_only_hint is False, name
    assert tools["forget"].annotations.destructive_hint is True
    assert tools["record_experience"].annotations.destructive_hint is False
    assert tools["record_experience"].input_schema["required"] == ["task", "action", "outcome"]
    # Each says when to call it, in plain sentences (no docstring indentation to pay for).
    for name, tool in tools.items():
        assert tool.description and "\n " not in tool.description, name


def _started(environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own program
        [MIRIX_MCP],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


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
def test_the_program_refuses_to_start_without_its_settings_naming_the_variable(
    environment: dict[str, str], message: str
) -> None:
    finished = _started(environment)
    assert finished.returncode == 2
    assert message in finished.stderr
    assert finished.stdout == ""  # nothing an MCP client would read as a message


def test_the_program_checks_its_key_and_server_at_start(web_url: str, org: TenantFixture) -> None:
    user = {"MIRIX_USER_ID": "sam"}
    wrong = _started(
        user | {"MIRIX_API_URL": web_url, "MIRIX_API_KEY": "mxk_nosuchkey_0123456789abcdef"}
    )
    assert wrong.returncode == 2
    assert "refused MIRIX_API_KEY (401" in wrong.stderr
    assert "mxk_nosuchkey" not in wrong.stderr  # a key is never echoed
    assert wrong.stdout == ""
    api_key, key = org.new_key()
    api_key_revoke(api_key=api_key)
    revoked = _started(user | {"MIRIX_API_URL": web_url, "MIRIX_API_KEY": key})
    assert revoked.returncode == 2 and "MIRIX_API_KEY" in revoked.stderr
    nowhere = f"http://127.0.0.1:{processes.free_port()}"  # nothing listens there
    unreachable = _started(user | {"MIRIX_API_URL": nowhere, "MIRIX_API_KEY": org.key})
    assert unreachable.returncode == 2
    assert f"Cannot reach the memory server at MIRIX_API_URL={nowhere}" in unreachable.stderr
    # Something else answering there: named too.
    elsewhere = _started(user | {"MIRIX_API_URL": f"{web_url}/admin", "MIRIX_API_KEY": org.key})
    assert elsewhere.returncode == 2 and "is it the memory server?" in elsewhere.stderr


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


def test_a_key_revoked_while_serving_is_a_tool_error_naming_the_key(
    web_url: str, org: TenantFixture, tmp_path: Path
) -> None:
    api_key, key = org.new_key()
    with agent(web_url, key, tmp_path / "mcp.log") as client:
        assert client.result("search_memories", query="draft")["count"] == 0
        api_key_revoke(api_key=api_key)
        message = client.error("search_memories", query="draft")
        assert "MIRIX_API_KEY" in message
        assert "401" in message
        assert key not in message  # a key is never echoed
        assert "MIRIX_API_KEY" in client.error("record_failure", task="t", action="a", reason="r")
        assert len(client.tools()) == len(READ_TOOLS | WRITE_TOOLS)  # still serving


class AnswerLost(httpx2.AsyncBaseTransport):
    """The network: the server gets each request; the first add's answer never comes back."""

    def __init__(self) -> None:
        self.network = httpx2.AsyncHTTPTransport()
        self.adds = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.network.handle_async_request(request)
        if request.url.path == "/memory/add":
            self.adds += 1
            if self.adds == 1:
                await response.aclose()
                raise httpx2.ReadTimeout("the answer was lost", request=request)
        return response


def test_an_add_whose_answer_was_lost_is_sent_again_and_stored_once(
    web_url: str, org: TenantFixture
) -> None:
    from mirix_mcp import Api, Settings

    from sessions.models import Message

    network = AnswerLost()

    async def add() -> Any:
        api = Api(Settings(web_url, org.key, "sam"), transport=network)
        try:
            return await api.add(
                {"messages": [{"role": "user", "content": "I moved to Lisbon in May"}]}
            )
        finally:
            await api.close()

    with start_blocking_portal() as portal:
        answer = portal.call(add)

    assert network.adds == 2  # the retry
    [stored] = Message.objects.filter(end_user__user_id="sam", client=org.client)
    assert answer["message_ids"] == [str(stored.pk)]  # as the first answer would have said
    assert stored.client_message_id.startswith("mcp-")


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
        assert "read-write key (MIRIX_API_KEY)" in message


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
    memory_types = tools["search_memories"].input_schema["properties"]["memory_type"]["enum"]
    # The API also takes the aliases the MIRIX client sends; an agent is offered the names.
    aliases = {"knowledge", "knowledge_vault_memory"}
    assert set(memory_types) == api_choices("/memory/search", "memory_type") - aliases
    outcomes = tools["record_experience"].input_schema["properties"]["outcome"]["enum"]
    assert set(outcomes) == api_choices("/experiences/recall", "outcome")


FACTS = {
    "I am allergic to penicillin": "penicillin allergy",
    "My daughter Maya starts school in September": "Maya school",
    "Our staging database runs on db-staging-3": "staging database",
}
MONTHS = ("january", "february", "march", "april", "may")


def _csv_task(client: Agent, month: str, *, failed_first: bool = True) -> None:
    """One task as an agent works it: the call that fails on the file's encoding, the fix."""
    task = f"load the {month} sales CSV export into a dataframe"
    started = client.result("start_task", task=task, tools={"read_csv": "reads a CSV file"})
    session_id = started["session_id"]
    assert "log_step" in started["next_step"]
    path = f"exports/sales-{month}.csv"
    if failed_first:
        logged = client.result(
            "log_step",
            session_id=session_id,
            tool_call={"name": "read_csv", "arguments": {"path": path}},
            tool_result={"content": "invalid start byte 0xe9 at position 1041", "is_error": True},
        )
        assert logged["logged"] == 2
    client.result(
        "log_step",
        session_id=session_id,
        tool_call={"name": "read_csv", "arguments": {"path": path, "encoding": "latin-1"}},
        tool_result={"content": "1,204 rows x 9 columns"},
    )
    client.result(
        "log_step", session_id=session_id, message={"role": "assistant", "content": "Loaded."}
    )
    finished = client.result(
        "finish_task", session_id=session_id, outcome="success", note="latin-1 read it"
    )
    assert finished["finished"] is True


def _remembered(client: Agent) -> None:
    """Three facts told, each found again once the worker has extracted them."""
    for fact in FACTS:
        assert client.result("remember", text=fact)["stored"] is True
    for fact, query in FACTS.items():
        word = fact.split()[-1]
        eventually(
            lambda query=query, word=word: any(
                word in json.dumps(memory)
                for memory in client.result("search_memories", query=query)["memories"]
            ),
            what=f"{query!r} finds {fact!r}",
        )


def _worked(client: Agent) -> None:
    """Five tasks worked, enough to start a learning run."""
    for month in MONTHS:
        _csv_task(client, month)


def _learned(client: Agent) -> dict[str, Any]:
    """The skill learned from the five tasks, found and read as a resource."""
    task = "load the june sales CSV export into a dataframe"
    found = eventually(
        lambda: client.result("retrieve_skills", task=task)["skills"],
        what="a skill learned from the five tasks",
    )
    skill = found[0]
    assert "latin-1" in json.dumps(skill), skill
    listed = client.result("list_skills")["skills"]
    [entry] = [each for each in listed if each["name"] == skill["name"]]
    assert entry["uri"] == f"skill://sam/{skill['name']}/SKILL.md"
    resources = client.resources()
    assert entry["uri"] in resources and "skill://index.json" in resources
    text = client.read(entry["uri"])
    assert text.startswith("---\n") and f'name: "{skill["name"]}"' in text
    assert "latin-1" in text
    index = json.loads(client.read("skill://index.json"))
    assert [each["url"] for each in index["skills"]] == [entry["uri"]]
    # A retrieval inside a task links the skill to the session and counts its outcome.
    started = client.result("start_task", task=task)
    linked = client.result("retrieve_skills", task=task, session_id=started["session_id"])
    assert linked["skills"][0]["name"] == skill["name"]
    client.result("finish_task", session_id=started["session_id"], outcome="success")
    return skill


def test_an_agent_remembers_works_and_learns_a_skill_over_stdio(
    web_url: str, org: TenantFixture, worker: None, tmp_path: Path
) -> None:
    log = tmp_path / "mcp.log"
    with agent(web_url, org.key, log, MIRIX_SKILLS_POLL_SECONDS="0.5") as client:
        _remembered(client)
        assert set(client.resources()) == {"skill://index.json"}  # nothing learned yet
        _worked(client)
        # The session that listed the resources is told when the learning run changes them.
        eventually(
            lambda: "notifications/resources/list_changed" in client.notified,
            what="a list_changed notification",
        )
        skill = _learned(client)
        # What the user asks to forget is gone: every memory that holds it (an episode may
        # hold several of the turns).
        holding = [
            each
            for each in client.result("search_memories", query="penicillin allergy")["memories"]
            if "penicillin" in json.dumps(each)
        ]
        assert holding
        for memory in holding:
            forgotten = client.result("forget", memory_type=memory["memory_type"], id=memory["id"])
            assert forgotten["forgotten"] is True
        again = client.error("forget", memory_type=holding[0]["memory_type"], id=holding[0]["id"])
        assert "already forgotten" in again
        assert not any(
            "penicillin" in json.dumps(each)
            for each in client.result("search_memories", query="penicillin")["memories"]
        )
        assert skill["name"] in {each["name"] for each in client.result("list_skills")["skills"]}


def test_a_team_shares_the_servers_mcp_endpoint_each_key_seeing_its_own(
    web_url: str, org: TenantFixture, other_org: TenantFixture, worker: None
) -> None:
    with http_agent(web_url, org.key) as alice:
        tools = alice.tools()
        assert set(tools) == READ_TOOLS | WRITE_TOOLS
        _remembered(alice)
        _worked(alice)
        skill = _learned(alice)
    # Another organization's key, the same user id: none of the above.
    with http_agent(web_url, other_org.key) as bob:
        assert bob.result("search_memories", query="penicillin allergy")["count"] == 0
        assert bob.result("list_skills")["count"] == 0
        assert set(bob.resources()) == {"skill://index.json"}
        with pytest.raises(McpError, match="No skill named"):
            bob.read(f"skill://sam/{skill['name']}/SKILL.md")
        bob.result("remember", text="I live in Lyon")
        eventually(
            lambda: bob.result("search_memories", query="Lyon")["count"] > 0,
            what="bob's own memory",
        )
    with http_agent(web_url, org.key) as alice:
        assert all(
            "Lyon" not in json.dumps(memory)
            for memory in alice.result("search_memories", query="Lyon")["memories"]
        )
    # A read-only key reads, and every write tool is refused.
    _, read_only = org.new_key(read_only=True)
    with http_agent(web_url, read_only) as reader:
        assert reader.result("list_skills")["count"] >= 1
        assert "read-only" in reader.error("remember", text="x")
        assert "read-only" in reader.error("start_task", task="x")
