"""A turn the client names by its own id (``client_message_id``) is stored once, however many
times it is sent: a retry after a timeout, a queue replayed by a second node, two calls at once.
The call that sends it again is answered as the first one was."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection, transaction

from memory.models import ExtractionJob
from memory.services import memory_add
from sessions.content import message_normalize
from sessions.models import Message, Session
from tests.factories import TenantFixture, tenant_fixture


def turn(text: str, message_id: str | None, role: str = "user") -> dict[str, Any]:
    sent: dict[str, Any] = {"role": role, "content": text}
    if message_id is not None:
        sent["client_message_id"] = message_id
    return sent


def add(org: TenantFixture, *messages: dict[str, Any], user: str = "ana", **body: Any):
    return org.api.post(
        "/memory/add", {"user_id": user, "messages": list(messages), **body}, format="json"
    )


def test_a_turn_sent_twice_is_stored_once_and_answered_as_the_first_time(
    org: TenantFixture,
) -> None:
    sent = [turn("I moved to Lyon.", "m-1"), turn("Nice!", "m-2", role="assistant")]
    first = add(org, *sent, session_id="s1")
    again = add(org, *sent, session_id="s1")
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json()
    assert Message.objects.count() == 2
    assert Session.objects.get().message_count == 2
    assert sorted(Message.objects.values_list("client_message_id", flat=True)) == ["m-1", "m-2"]
    assert ExtractionJob.objects.count() == 1


def test_a_call_mixing_stored_and_new_turns_stores_the_new_ones_after_the_others(
    org: TenantFixture,
) -> None:
    first = add(org, turn("one", "a"), turn("two", "b"), session_id="s").json()
    second = add(org, turn("two", "b"), turn("three", "c"), turn("four", None), session_id="s")
    ids = second.json()["message_ids"]
    assert ids[0] == first["message_ids"][1]
    rows = {str(row.pk): row for row in Message.objects.all()}
    assert [rows[pk].text for pk in ids] == ["two", "three", "four"]
    assert [row.text for row in Message.objects.order_by("position")] == [
        "one",
        "two",
        "three",
        "four",
    ]
    assert list(Message.objects.order_by("position").values_list("position", flat=True)) == [
        0,
        1,
        2,
        3,
    ]


def test_the_same_id_twice_in_one_call_is_one_turn(org: TenantFixture) -> None:
    body = add(org, turn("hello", "x"), turn("hello again", "x"), turn("bye", None)).json()
    assert Message.objects.count() == 2
    assert body["message_ids"][0] == body["message_ids"][1] != body["message_ids"][2]
    assert Message.objects.get(client_message_id="x").text == "hello"


def test_an_id_names_a_turn_of_one_user_for_one_client(
    org: TenantFixture,
) -> None:
    add(org, turn("mine", "same"), user="ana")
    add(org, turn("hers", "same"), user="bea")
    add(org.another_client("another app"), turn("the other app's", "same"), user="ana")
    assert sorted(Message.objects.values_list("text", flat=True)) == [
        "hers",
        "mine",
        "the other app's",
    ]


def test_turns_without_an_id_are_stored_each_time(org: TenantFixture) -> None:
    add(org, turn("hello", None))
    add(org, turn("hello", None))
    assert Message.objects.count() == 2


def test_a_retry_of_stored_task_turns_to_a_closed_session_is_answered_not_refused(
    org: TenantFixture,
) -> None:
    """The first call went through, the session was closed since: the retry changes nothing
    and says what the first call said (a 409 would tell the client its turns were lost)."""
    sent = [turn("deploy", "t-1"), turn("done", "t-2", role="assistant")]
    first = add(org, *sent, session_id="task-1", session_tag="task")
    assert first.json()["status"] == "stored"
    closed = org.api.post("/sessions/task-1/close", {"user_id": "ana"}, format="json")
    assert closed.status_code == 200, closed.content
    again = add(org, *sent, session_id="task-1", session_tag="task")
    assert again.status_code == 202
    assert again.json() == first.json()
    # A new turn to the closed session is refused as before.
    assert add(org, turn("more", "t-3"), session_id="task-1").status_code == 409


@pytest.mark.parametrize(
    "bad",
    ["", " padded", "padded ", "a\u0007bell", "x" * 256, 12, ["m-1"], {"id": 1}],
    ids=["empty", "leading", "trailing", "control", "long", "number", "list", "object"],
)
def test_a_malformed_id_is_422_naming_the_turn_and_stores_nothing(
    org: TenantFixture, bad: Any
) -> None:
    response = add(
        org, turn("fine", "ok"), {"role": "user", "content": "x", "client_message_id": bad}
    )
    assert response.status_code == 422, response.content
    assert "messages.1.client_message_id" in response.json()["fields"]
    assert not Message.objects.exists()


def test_the_turns_id_is_listed_with_the_turn(org: TenantFixture) -> None:
    add(org, turn("hello", "m-9"), turn("no id", None), session_id="s")
    listed = org.api.get("/sessions/s/messages", {"user_id": "ana"}).json()["results"]
    assert [m["client_message_id"] for m in listed] == ["m-9", None]


def test_two_calls_sending_the_same_turns_at_once_store_them_once(
    transactional_db: None,
) -> None:
    """One call has inserted the turns and not yet committed when the other sends them: the
    second waits on the unique id, loses, runs again, and is answered with the first's rows."""
    owner = tenant_fixture("alice")
    # The user exists before the race: the race is on the turns' ids, not on the user row.
    assert add(owner, turn("hello", None)).status_code == 202
    sent = [turn("I moved to Lyon.", "r-1"), turn("Nice!", "r-2", role="assistant")]
    inserted, go = threading.Event(), threading.Event()
    first_ids: list[str] = []
    answers: list[dict[str, Any]] = []

    def first() -> None:
        try:
            with transaction.atomic():
                result = memory_add(
                    tenant=owner.tenant,
                    user_id="ana",
                    messages=[
                        message_normalize(raw, roles=("user", "assistant"), where="m")
                        for raw in sent
                    ],
                    session_id="s",
                    session_tag=None,
                    filter_tags={},
                    occurred_at=None,
                    meta_agent_id=None,
                )
                first_ids.extend(str(row.pk) for row in result.messages)
                inserted.set()
                go.wait(10)
        finally:
            connection.close()

    def second() -> None:
        try:
            answers.append(add(owner, *sent, session_id="other").json())
        finally:
            connection.close()

    holding = threading.Thread(target=first)
    holding.start()
    assert inserted.wait(10)
    sending = threading.Thread(target=second)
    sending.start()
    time.sleep(0.5)  # the second call waits on the first's uncommitted ids
    assert not answers
    go.set()
    holding.join(10)
    sending.join(10)

    assert [answer["message_ids"] for answer in answers] == [first_ids]
    assert Message.objects.filter(client_message_id__startswith="r-").count() == 2
    # The second call's session holds nothing it reserved for turns it did not store.
    assert not Session.objects.filter(session_id="other", message_count__gt=0).exists()
