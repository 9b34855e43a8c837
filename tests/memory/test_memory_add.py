"""POST /memory/add: every rule, each rejection storing nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection

from accounts.models import EndUser
from memory.models import ExtractionJob
from mirix_site.api.parsers import MAX_JSON_DEPTH
from sessions.models import Message, Session
from tests.factories import TenantFixture


def turns(
    user: str = "Hello there", assistant: str = "Hi! How can I help?"
) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": [{"type": "text", "text": user}]},
        {"role": "assistant", "content": [{"type": "text", "text": assistant}]},
    ]


def add(org: TenantFixture, **body: Any):
    body.setdefault("user_id", "demo-user")
    body.setdefault("messages", turns())
    return org.api.post("/memory/add", body, format="json")


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def stored_nothing() -> bool:
    return not (
        Message.objects.exists() or Session.objects.exists() or ExtractionJob.objects.exists()
    )


def test_add_stores_turns_and_answers_202_in_the_mirix_shape(org: TenantFixture) -> None:
    response = add(org, session_id="sess-1")
    assert response.status_code == 202
    body = response.json()
    assert body["success"] is True
    assert body["status"] == "queued"
    assert body["message_count"] == 2
    assert body["session_id"] == "sess-1"
    assert body["agent_id"] is None
    messages = list(Message.objects.order_by("position"))
    assert [m.role for m in messages] == ["user", "assistant"]
    assert [str(m.pk) for m in messages] == body["message_ids"]
    assert all(m.extraction == Message.Extraction.PENDING for m in messages)
    assert ExtractionJob.objects.filter(status=ExtractionJob.Status.QUEUED).count() == 1


def test_turns_keep_their_order_across_adds(org: TenantFixture) -> None:
    add(org, session_id="s", messages=turns("first", "second"))
    add(org, session_id="s", messages=turns("third", "fourth"))
    listed = org.api.get("/sessions/s/messages", {"user_id": "demo-user"}).json()["results"]
    assert [m["content"][0]["text"] for m in listed] == ["first", "second", "third", "fourth"]
    assert [m["position"] for m in listed] == [0, 1, 2, 3]
    # Both adds wait in one queued job: a batch per user, not per request.
    assert ExtractionJob.objects.count() == 1


def test_tool_calls_and_tool_turns_come_back_unchanged(org: TenantFixture) -> None:
    sent = [
        {"role": "user", "content": [{"type": "text", "text": "Deploy the service."}]},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "kubectl_apply", "arguments": '{"file": "deploy.yaml"}'},
                }
            ],
        },
        {
            "role": "tool",
            "name": "kubectl_apply",
            "tool_call_id": "call_1",
            "content": "error: forbidden (missing RBAC)",
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Fixed the RBAC role."}]},
    ]
    assert add(org, session_id="deploy-1", messages=sent).status_code == 202
    listed = org.api.get("/sessions/deploy-1/messages", {"user_id": "demo-user"}).json()["results"]
    assert [m["role"] for m in listed] == ["user", "assistant", "tool", "assistant"]
    assert listed[1]["tool_calls"] == sent[1]["tool_calls"]
    assert listed[2]["name"] == "kubectl_apply"
    assert listed[2]["tool_call_id"] == "call_1"
    assert listed[2]["content"] == [{"type": "text", "text": "error: forbidden (missing RBAC)"}]
    assert all(m["id"].isdigit() for m in listed)


def test_session_id_of_64_characters_is_accepted(org: TenantFixture) -> None:
    assert add(org, session_id="a" * 64).status_code == 202


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"session_id": "a" * 65}, "session_id"),
        ({"session_id": "a/b"}, "session_id"),
        ({"session_id": "a b"}, "session_id"),
        ({"session_id": "a\n"}, "session_id"),
        ({"filter_tags": {"session_id": "a\n"}}, "filter_tags.session_id"),
        ({"session_id": "s1", "filter_tags": {"session_id": "s2"}}, "filter_tags.session_id"),
        (
            {"messages": turns(user="x" * (django_settings.MESSAGE_MAX_CHARS + 1))},
            "messages.0.content",
        ),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages.0.role"),
        ({"messages": [*turns(), {"role": "robot", "content": "hi"}]}, "messages.2.role"),
        ({"session_tag": "task"}, "session_id"),
        ({"session_tag": "meeting", "session_id": "s"}, "session_tag"),
        ({"messages": []}, "messages"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "file_uri", "file_uri": "/etc/passwd"}]}
                ]
            },
            "messages.0.content.0",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}
                        ],
                    }
                ]
            },
            "messages.0.content.0.image_url",
        ),
        ({"occurred_at": "yesterday"}, "occurred_at"),
        ({"user_id": "not valid/"}, "user_id"),
        ({"messages": [{"role": "tool", "content": "ok", "name": 0}]}, "messages.0.name"),
        (
            {"messages": [{"role": "tool", "content": "ok", "tool_call_id": []}]},
            "messages.0.tool_call_id",
        ),
        # JSON's own types, as the schema declares them (DRF took 0.0 and "yes" for booleans).
        ({"verbose": 0.0}, "verbose"),
        ({"async_add": "yes"}, "async_add"),
    ],
    ids=[
        "session-65",
        "session-slash",
        "session-space",
        "session-final-newline",
        "filter-tag-session-final-newline",
        "filter-tag-mismatch",
        "text-too-long",
        "unknown-role",
        "unknown-role-later",
        "task-without-session",
        "unknown-tag",
        "no-messages",
        "file-uri-part",
        "file-url",
        "bad-occurred-at",
        "bad-user-id",
        "name-not-a-string",
        "tool-call-id-not-a-string",
        "boolean-as-number",
        "boolean-as-text",
    ],
)
def test_invalid_adds_are_422_and_store_nothing(
    org: TenantFixture, body: dict[str, Any], field: str
) -> None:
    response = add(org, **body)
    assert response.status_code == 422, response.json()
    assert response.json()["code"] == "invalid"
    assert field in response.json()["fields"], response.json()
    assert stored_nothing()


def test_a_long_pasted_document_is_accepted_up_to_the_cap(org: TenantFixture) -> None:
    # A LongMemEval-S user turn is 76,560 characters long; the default cap is well above it.
    assert django_settings.MESSAGE_MAX_CHARS >= 150_000
    assert add(org, messages=turns(user="x" * 76_560)).status_code == 202
    at_cap = add(org, messages=turns(user="y" * django_settings.MESSAGE_MAX_CHARS))
    assert at_cap.status_code == 202
    assert Message.objects.filter(text__startswith="y").count() == 1


def test_the_text_cap_is_a_setting(org: TenantFixture, settings) -> None:
    settings.MESSAGE_MAX_CHARS = 1000
    response = add(org, messages=turns(user="x" * 1001))
    assert response.status_code == 422
    assert response.json()["fields"]["messages.0.content"] == [
        "At most 1000 characters of text (1001 sent)."
    ]
    assert stored_nothing()


def _raw_add(org: TenantFixture, body: bytes | str, content_type: str = "application/json"):
    return org.api.generic("POST", "/memory/add", body, content_type=content_type)


def test_a_body_over_the_limit_is_413_saying_the_limit(org: TenantFixture) -> None:
    limit = django_settings.API_MAX_BODY_BYTES
    big = json.dumps({"user_id": "demo-user", "messages": turns(user="x" * limit)})
    response = _raw_add(org, big)
    assert response.status_code == 413
    assert response.json() == {
        "detail": f"The request body is over {limit:,} bytes.",
        "code": "too_large",
    }
    assert stored_nothing()


@pytest.mark.parametrize(
    "body",
    [
        "[" * 100_000,
        '{"user_id": "demo-user", "messages": ' + "[" * 5000 + "]" * 5000 + "}",
        # Within the decoder's own limit, beyond ours: tags nested 100 deep.
        json.dumps({"user_id": "demo-user", "messages": turns(), "filter_tags": _nested(100)}),
    ],
    ids=["100k-brackets", "5000-deep", "100-deep-tags"],
)
def test_json_nested_too_deep_is_400_and_stores_nothing(org: TenantFixture, body: str) -> None:
    response = _raw_add(org, body)
    assert response.status_code == 400
    assert response.json() == {
        "detail": f"The JSON body is nested more than {MAX_JSON_DEPTH} levels deep.",
        "code": "too_deep",
    }
    assert stored_nothing()


def test_a_form_body_is_415_and_creates_nothing(org: TenantFixture) -> None:
    for path, body in [
        ("/users/create_or_get", {"user_id": "formed"}),
        ("/memory/add", {"user_id": "demo-user", "messages": "x"}),
    ]:
        response = org.api.post(path, body, format="multipart")
        assert response.status_code == 415, path
        assert response.json()["code"] == "unsupported_media_type"
    assert not EndUser.objects.filter(user_id="formed").exists()
    assert stored_nothing()


def test_adding_to_a_closed_session_is_409_and_stores_nothing(org: TenantFixture) -> None:
    add(org, session_id="done")
    org.api.post("/sessions/done/close", {"user_id": "demo-user"}, format="json")
    before = Message.objects.count()
    response = add(org, session_id="done")
    assert response.status_code == 409
    assert response.json()["code"] == "session_closed"
    assert Message.objects.count() == before


def test_task_sessions_are_stored_for_learning_and_skip_extraction(org: TenantFixture) -> None:
    response = add(org, session_id="task-1", session_tag="task")
    assert response.status_code == 202
    assert response.json()["status"] == "stored"
    assert set(Message.objects.values_list("extraction", flat=True)) == {"skipped"}
    assert not ExtractionJob.objects.exists()
    assert Session.objects.get(session_id="task-1").tag == "task"
    # The tag is the session's: a later chat-tagged add to it is a conflict.
    assert add(org, session_id="task-1", session_tag="chat").status_code == 409


def test_without_session_id_turns_go_to_the_default_conversation(org: TenantFixture) -> None:
    first = add(org)
    second = add(org)
    assert first.json()["session_id"] is None
    sessions = Session.objects.all()
    assert len(sessions) == 1
    assert sessions[0].session_id is None
    assert sessions[0].message_count == 4
    assert Message.objects.filter(extraction="pending").count() == 4
    assert second.status_code == 202


def test_a_session_named_only_in_filter_tags_is_used(org: TenantFixture) -> None:
    response = add(org, filter_tags={"session_id": "sess-789", "project": "alpha"})
    assert response.json()["session_id"] == "sess-789"
    assert Message.objects.first().filter_tags == {"session_id": "sess-789", "project": "alpha"}


def test_fields_the_mirix_client_sends_are_accepted_and_ignored(org: TenantFixture) -> None:
    response = add(
        org,
        chaining=False,
        verbose=True,
        use_cache=False,
        async_add=True,
        local_model_for_retrieval=None,
        occurred_at="2025-11-18T15:30:00",
    )
    assert response.status_code == 202
    assert Message.objects.first().occurred_at.isoformat() == "2025-11-18T15:30:00+00:00"


def test_another_clients_meta_agent_is_not_found(org: TenantFixture) -> None:
    sibling = org.another_client("sibling")
    theirs = sibling.api.post(
        "/agents/meta/initialize", {"provider": "openai"}, format="json"
    ).json()
    response = add(org, meta_agent_id=theirs["id"])
    assert response.status_code == 404
    assert stored_nothing() or not Message.objects.exists()
    mine = org.api.post("/agents/meta/initialize", {"provider": "openai"}, format="json").json()
    assert add(org, meta_agent_id=mine["id"]).json()["agent_id"] == mine["id"]


def test_the_end_user_is_created_on_first_add(org: TenantFixture) -> None:
    add(org, user_id="brand-new")
    assert org.api.get("/users/brand-new").status_code == 200


def _prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE NOT from_sql")
        return [row[0] for row in cursor.fetchall()]


def test_repeated_adds_run_their_statements_prepared(org: TenantFixture) -> None:
    # Parsed and planned once per connection, not on every add (bench/RESULTS.md). psycopg
    # prepares a statement on its sixth run: the sixth add to the same session.
    for number in range(6):
        assert (
            add(org, session_id="s", messages=turns(f"q{number}", f"a{number}")).status_code == 202
        )
    prepared = " ".join(_prepared_statements())
    for statement in (
        "UPDATE conversations_session",  # the session's positions
        'INSERT INTO "conversations_message"',  # the turns
        "FROM accounts_enduser",  # the end user
        "INSERT INTO memory_extractionjob",  # the job
    ):
        assert statement in prepared
    # Still the same adds: twelve turns in order in one session, one queued job.
    assert list(Message.objects.order_by("position").values_list("text", flat=True)) == [
        text for number in range(6) for text in (f"q{number}", f"a{number}")
    ]
    assert Session.objects.get().message_count == 12
    assert ExtractionJob.objects.count() == 1


def test_opening_sessions_runs_prepared(org: TenantFixture) -> None:
    for number in range(6):
        assert add(org, session_id=f"s{number}", filter_tags={"n": number}).status_code == 202
    assert 'INSERT INTO "conversations_session"' in " ".join(_prepared_statements())
    opened = Session.objects.order_by("session_id")
    assert [(s.session_id, s.filter_tags, s.message_count) for s in opened] == [
        (f"s{number}", {"n": number}, 2) for number in range(6)
    ]
    assert all(s.status == Session.Status.OPEN and s.created_at for s in opened)


def test_adds_work_with_prepared_statements_off(transactional_db: None, org: TenantFixture) -> None:
    # DB_PREPARED_STATEMENTS=false (a pooler that cannot carry them): nothing is prepared.
    connection.close()
    options = connection.settings_dict["OPTIONS"]
    saved = options["prepare_threshold"]
    options["prepare_threshold"] = None
    try:
        for number in range(6):
            response = add(org, session_id="s", messages=turns(f"q{number}", f"a{number}"))
            assert response.status_code == 202
        assert _prepared_statements() == []
    finally:
        options["prepare_threshold"] = saved
        connection.close()
    assert Message.objects.count() == 12
