"""Users and conversations as a MIRIX client makes them ([18/18] items 7 and 9).

A MIRIX user id is any string (``mirix/schemas/user.py``; MIRIX's own sample user is
``"caring cathy"``, ``samples/`` of MIRIX's ``dev`` branch @66d27f8), and its client's ``add``
sends no session id (``mirix/client/remote_client.py`` ``add``: user_id, meta_agent_id,
messages): the turns go to the user's default conversation, which every read must open."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from sessions.models import Message, Session
from tests.factories import chat_turns
from tests.mirix_compat.conftest import Mirix

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_user_id_with_a_space_is_a_user_id(mirix: Mirix) -> None:
    assert mirix.client.create_or_get_user(user_id="caring cathy") == "caring cathy"
    mirix.client.add(user_id="caring cathy", messages=chat_turns("I like hiking.", "Noted."))

    path = f"/users/{quote('caring cathy')}"
    assert mirix.tenant.api.get(path).json()["id"] == "caring cathy"
    assert Message.objects.filter(session__end_user__user_id="caring cathy").count() == 2


@pytest.mark.parametrize(
    "user_id",
    ["nul\x00", "tab\there", "new\nline", "del\x7f", "c1\x85", " leading", "trailing ", "a/b"],
)
def test_control_characters_slashes_and_edge_spaces_are_still_refused(
    mirix: Mirix, user_id: str
) -> None:
    response = mirix.tenant.api.post("/users/create_or_get", {"user_id": user_id}, format="json")
    assert response.status_code == 422
    assert "user_id" in response.json()["fields"]


def test_turns_sent_without_a_session_read_back_through_the_default_conversation(
    mirix: Mirix,
) -> None:
    mirix.client.add(user_id="dana", messages=chat_turns("My cat is Miso.", "Cute!"))
    mirix.client.add(user_id="dana", messages=chat_turns("She is three.", "Nice."))

    api = mirix.tenant.api
    (listed,) = api.get("/sessions", {"user_id": "dana"}).json()["results"]
    default = Session.objects.get(end_user__user_id="dana")
    assert default.session_id is None and listed["session_id"] is None
    # It has a name every read accepts: default.<its number>.
    assert listed["name"] == f"default.{default.pk}"
    for name in (listed["name"], "default"):
        detail = api.get(f"/sessions/{name}", {"user_id": "dana"})
        assert detail.status_code == 200 and detail.json()["id"] == str(default.pk)
        messages = api.get(f"/sessions/{name}/messages", {"user_id": "dana"}).json()["results"]
        assert [m["content"][0]["text"] for m in messages] == [
            "My cat is Miso.",
            "Cute!",
            "She is three.",
            "Nice.",
        ]
    # Another user's default conversation is not dana's.
    mirix.client.add(user_id="eve", messages=chat_turns("Hi.", "Hello."))
    eves = Session.objects.get(end_user__user_id="eve")
    missing = api.get(f"/sessions/default.{eves.pk}/messages", {"user_id": "dana"})
    assert missing.status_code == 404
    # A caller's own session named "default" is that session, not the default conversation.
    api.post(
        "/memory/add",
        {"user_id": "dana", "session_id": "default", "messages": chat_turns("Named.", "Ok.")},
        format="json",
    )
    named = api.get("/sessions/default/messages", {"user_id": "dana"}).json()["results"]
    assert [m["content"][0]["text"] for m in named] == ["Named.", "Ok."]
