"""Session lifecycle: listing, reading, closing (explicit and idle), and the close signal."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from sessions.models import Session
from sessions.services import sessions_close_idle
from sessions.signals import session_closed
from tests.factories import TenantFixture, chat_turns


def add(
    org: TenantFixture, session_id: str | None = None, user_id: str = "sam", **body: Any
) -> None:
    payload = {"user_id": user_id, "messages": chat_turns("hi", "hello"), **body}
    if session_id:
        payload["session_id"] = session_id
    assert org.api.post("/memory/add", payload, format="json").status_code == 202


@pytest.fixture
def closes() -> Iterator[list[Session]]:
    seen: list[Session] = []

    def receiver(sender: type, session: Session, **kwargs: Any) -> None:
        seen.append(session)

    session_closed.connect(receiver, dispatch_uid="test-closes")
    yield seen
    session_closed.disconnect(dispatch_uid="test-closes")


def test_list_and_read_sessions(org: TenantFixture, django_assert_max_num_queries) -> None:
    add(org, "a")
    add(org, "b", session_tag="task")
    add(org, "b")
    with django_assert_max_num_queries(4):
        listed = org.api.get("/sessions", {"user_id": "sam"}).json()["results"]
    assert [(s["session_id"], s["tag"], s["message_count"]) for s in listed] == [
        ("b", "task", 4),
        ("a", "chat", 2),
    ]
    detail = org.api.get("/sessions/a", {"user_id": "sam"}).json()
    assert detail["status"] == "open" and detail["user_id"] == "sam"
    assert org.api.get("/sessions/missing", {"user_id": "sam"}).status_code == 404
    assert org.api.get("/sessions").status_code == 422  # user_id is required


def test_messages_are_paged_in_order(org: TenantFixture) -> None:
    for _ in range(3):
        add(org, "long")
    first = org.api.get("/sessions/long/messages", {"user_id": "sam", "limit": 4}).json()
    second = org.api.get(first["next"]).json()
    assert [m["position"] for m in first["results"] + second["results"]] == list(range(6))
    assert second["next"] is None


def test_close_is_idempotent_and_signals_once(
    org: TenantFixture, closes: list[Session], django_capture_on_commit_callbacks
) -> None:
    add(org, "s1")
    with django_capture_on_commit_callbacks(execute=True):
        first = org.api.post("/sessions/s1/close", {"user_id": "sam"}, format="json")
    with django_capture_on_commit_callbacks(execute=True):
        again = org.api.post("/sessions/s1/close", {"user_id": "sam"}, format="json")
    assert first.status_code == again.status_code == 200
    assert first.json()["status"] == "closed"
    assert first.json()["close_reason"] == "explicit"
    assert again.json()["closed_at"] == first.json()["closed_at"]
    assert [session.session_id for session in closes] == ["s1"]


def test_another_clients_session_cannot_be_closed(org: TenantFixture) -> None:
    sibling = org.another_client("sibling")
    add(sibling, "theirs")
    assert (
        org.api.post("/sessions/theirs/close", {"user_id": "sam"}, format="json").status_code == 404
    )


def test_read_scopes_let_a_client_read_a_siblings_sessions(org: TenantFixture) -> None:
    from accounts.services import client_read_scopes_set

    sibling = org.another_client("sibling")
    add(sibling, "shared")
    assert org.api.get("/sessions/shared", {"user_id": "sam"}).status_code == 404
    client_read_scopes_set(client=org.client, scopes=[sibling.client])
    assert org.api.get("/sessions/shared", {"user_id": "sam"}).status_code == 200


def test_the_sweeper_closes_idle_sessions_once(
    org: TenantFixture, closes: list[Session], django_capture_on_commit_callbacks, settings
) -> None:
    add(org, "quiet")
    add(org)  # the default conversation idles too
    timeout = timedelta(seconds=settings.SESSION_IDLE_TIMEOUT)
    later = timezone.now() + timeout + timedelta(minutes=1)

    with django_capture_on_commit_callbacks(execute=True):
        assert sessions_close_idle(idle_for=timeout) == 0  # nothing idle yet
        assert sessions_close_idle(idle_for=timeout, now=later) == 2
    closed = Session.objects.filter(status="closed")
    assert closed.count() == 2
    assert set(closed.values_list("close_reason", flat=True)) == {"idle"}
    assert len(closes) == 2
    with django_capture_on_commit_callbacks(execute=True):
        assert sessions_close_idle(idle_for=timeout, now=later) == 0
    assert len(closes) == 2
    # New chat turns without a session_id open a new default conversation.
    add(org)
    assert Session.objects.filter(session_id__isnull=True, status="open").count() == 1


def test_recent_activity_keeps_a_session_open(org: TenantFixture, settings) -> None:
    add(org, "busy")
    timeout = timedelta(seconds=settings.SESSION_IDLE_TIMEOUT)
    Session.objects.update(last_activity_at=timezone.now() - timeout - timedelta(minutes=5))
    add(org, "busy")  # activity now
    assert sessions_close_idle(idle_for=timeout) == 0
    assert Session.objects.get().status == "open"


# Cursors no page handed out: another list's shape, text, numbers past what a key holds, an
# old base64 cursor. The schema states a cursor's format; anything else is 422.
CRAFTED_CURSORS = [
    "abc",
    "1_",
    "_1",
    "1_2_3",
    "-1_2",
    "1.5_2",
    "9" * 19 + "_1",
    "WyIyMDAwLTAxLTAxVDAwOjAwOjAwKzAwOjAwIiwgMV0",
]


def test_a_crafted_cursor_is_422_on_every_list(org: TenantFixture) -> None:
    add(org, "a")
    lists = {
        "/users": {},
        "/sessions": {"user_id": "sam"},
        "/sessions/a/messages": {"user_id": "sam"},
    }
    for path, params in lists.items():
        assert org.api.get(path, params).status_code == 200, path
        for cursor in CRAFTED_CURSORS:
            response = org.api.get(path, {**params, "cursor": cursor})
            assert response.status_code == 422, (path, cursor)
            assert response.json()["fields"] == {
                "cursor": ["Invalid cursor: the next_cursor of a page."]
            }


def test_any_cursor_of_the_stated_format_is_read(org: TenantFixture) -> None:
    """Every cursor a client could write from the schema is a point to page after."""
    add(org, "a")
    for path, params, cursor in [
        ("/users", {}, "0_0"),
        ("/users", {}, "99999999999999999_999999999999999999"),
        ("/sessions", {"user_id": "sam"}, "1733312345678901_1"),
        ("/sessions/a/messages", {"user_id": "sam"}, "0"),
    ]:
        response = org.api.get(path, {**params, "cursor": cursor})
        assert response.status_code == 200, (path, cursor, response.content)


READ_CSV = {
    "type": "function",
    "function": {
        "name": "read_csv",
        "description": "Read a CSV file into a table.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}


def test_the_tools_a_session_declares_are_kept_by_name(org: TenantFixture) -> None:
    add(org, "t", session_tag="task", tools=[READ_CSV])
    # Anthropic's and MCP's shape; a name declared again takes its new description.
    later = [
        {
            "name": "read_csv",
            "description": "Read a CSV file,\n  any encoding.",
            "input_schema": {},
        },
        {"name": "plot", "input_schema": {"type": "object"}},
    ]
    add(org, "t", session_tag="task", tools=later)
    add(org, "t", session_tag="task")  # an add without tools keeps them
    detail = org.api.get("/sessions/t", {"user_id": "sam"}).json()
    assert detail["tools"] == {"read_csv": "Read a CSV file, any encoding.", "plot": ""}
    assert Session.objects.get(session_id="t").message_count == 6


@pytest.mark.parametrize(
    ("tools", "field"),
    [
        ({"name": "read_csv"}, "tools"),
        ([READ_CSV] * 129, "tools"),
        (["read_csv"], "tools.0"),
        ([{"type": "function", "function": {"description": "no name"}}], "tools.0.function.name"),
        ([READ_CSV, {"name": " "}], "tools.1.name"),
        ([{"name": "x", "description": 3}], "tools.0.description"),
        ([{"name": "x", "description": "d" * 4097}], "tools.0.description"),
    ],
)
def test_bad_tool_definitions_are_422_and_store_nothing(
    org: TenantFixture, tools: Any, field: str
) -> None:
    body = {
        "user_id": "sam",
        "session_id": "t",
        "session_tag": "task",
        "messages": chat_turns("hi", "hello"),
        "tools": tools,
    }
    response = org.api.post("/memory/add", body, format="json")
    assert response.status_code == 422, response.content
    assert list(response.json()["fields"]) == [field]
    assert not Session.objects.filter(session_id="t").exists()


def test_sweep_sessions_dry_run_then_sweep(org: TenantFixture, settings) -> None:
    from io import StringIO

    from django.core.management import call_command

    add(org, "quiet")
    add(org, "busy")
    Session.objects.filter(session_id="quiet").update(
        last_activity_at=timezone.now() - timedelta(hours=5)
    )
    out = StringIO()
    call_command("sweep_sessions", "--idle-hours", "4", "--dry-run", stdout=out)
    assert "Dry run: 1 open sessions idle for more than 4:00:00 would close." in out.getvalue()
    assert not Session.objects.filter(status="closed").exists()

    out = StringIO()
    call_command("sweep_sessions", "--idle-hours", "4", stdout=out)
    assert out.getvalue().splitlines()[-1] == "Closed 1 sessions idle for more than 4:00:00."
    assert list(Session.objects.filter(status="closed").values_list("session_id", flat=True)) == [
        "quiet"
    ]
    # The default is the server's own idle timeout (48 h): nothing else is that idle.
    out = StringIO()
    call_command("sweep_sessions", stdout=out)
    assert out.getvalue().startswith("Closed 0 sessions idle for more than 2 days")
