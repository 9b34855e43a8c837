"""A task session's stated outcome: POST /sessions/{id}/close with ``outcome`` and ``note``,
stored, read back (API, admin, export), refused on chat sessions and for another outcome once
closed, and the note's secrets masked where turns' are."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from accounts.services import api_key_create
from sessions.api.serializers import MAX_NOTE_CHARS
from sessions.models import Message, Session
from tests.factories import TenantFixture, api_client_with, chat_turns

NOTE = "The import stopped at row 812: the file mixes two encodings."
SECRET_NOTE = "Logged in with password hunter2-garden, then the export failed."


def add(org: TenantFixture, session_id: str, tag: str = "task") -> None:
    response = org.api.post(
        "/memory/add",
        {
            "user_id": "sam",
            "session_id": session_id,
            "session_tag": tag,
            "messages": chat_turns("Import the orders file.", "Importing it now."),
        },
        format="json",
    )
    assert response.status_code == 202, response.content


def close(org: TenantFixture, session_id: str, api: Any = None, **body: Any) -> Any:
    return (api or org.api).post(
        f"/sessions/{session_id}/close", {"user_id": "sam", **body}, format="json"
    )


def test_a_task_session_closed_with_an_outcome_and_note_reads_them_back(
    org: TenantFixture,
) -> None:
    add(org, "import")
    closed = close(org, "import", outcome="failure", note=f"  {NOTE}  ")
    assert closed.status_code == 200, closed.content
    assert (closed.json()["outcome"], closed.json()["note"]) == ("failure", NOTE)
    stored = Session.objects.get(session_id="import")
    assert (stored.status, stored.outcome, stored.note) == ("closed", "failure", NOTE)
    detail = org.api.get("/sessions/import", {"user_id": "sam"}).json()
    assert (detail["outcome"], detail["note"]) == ("failure", NOTE)
    [listed] = org.api.get("/sessions", {"user_id": "sam"}).json()["results"]
    assert (listed["outcome"], listed["note"]) == ("failure", NOTE)
    # The turns are as they were sent: the statement is no turn of the session.
    assert Message.objects.filter(session=stored).count() == 2


def test_a_session_closed_without_stating_reads_null(org: TenantFixture) -> None:
    add(org, "plain")
    closed = close(org, "plain", note="   ")  # a blank note is no note
    assert closed.status_code == 200, closed.content
    assert (closed.json()["outcome"], closed.json()["note"]) == (None, None)
    assert Session.objects.get(session_id="plain").note is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"outcome": "great"}, "outcome"),
        ({"outcome": 1}, "outcome"),
        ({"outcome": "success", "note": "x" * (MAX_NOTE_CHARS + 1)}, "note"),
        ({"outcome": "success", "note": ["a list"]}, "note"),
    ],
    ids=["unknown-outcome", "outcome-not-text", "note-too-long", "note-not-text"],
)
def test_a_bad_outcome_or_note_is_422_naming_it_and_closes_nothing(
    org: TenantFixture, body: dict[str, Any], field: str
) -> None:
    add(org, "bad")
    response = close(org, "bad", **body)
    assert response.status_code == 422, response.content
    assert list(response.json()["fields"]) == [field]
    assert Session.objects.get(session_id="bad").status == "open"


def test_a_chat_session_states_no_outcome(org: TenantFixture) -> None:
    add(org, "chatty", tag="chat")
    refused = close(org, "chatty", outcome="success", note=NOTE)
    assert refused.status_code == 422, refused.content
    assert refused.json()["code"] == "invalid"
    assert set(refused.json()["fields"]) == {"outcome", "note"}
    assert "task session" in refused.json()["fields"]["outcome"][0]
    assert Session.objects.get(session_id="chatty").status == "open"
    assert close(org, "chatty").status_code == 200  # closing it plainly is as before


def test_closing_again_repeats_the_statement_or_is_a_conflict(org: TenantFixture) -> None:
    add(org, "done")
    first = close(org, "done", outcome="success", note=NOTE)
    assert first.status_code == 200
    # A retry, or a close that states nothing: the session as it is.
    assert close(org, "done", outcome="success", note=NOTE).json() == first.json()
    assert close(org, "done").json() == first.json()
    assert close(org, "done", outcome="success").json() == first.json()
    for other in ({"outcome": "failure"}, {"outcome": "success", "note": "Another note."}):
        conflict = close(org, "done", **other)
        assert conflict.status_code == 409, conflict.content
        assert conflict.json()["code"] == "session_outcome_conflict"
    stored = Session.objects.get(session_id="done")
    assert (stored.outcome, stored.note) == ("success", NOTE)

    # Closed stating nothing (explicitly, or by the sweeper): its outcome is the turns'.
    add(org, "quiet")
    assert close(org, "quiet").status_code == 200
    assert close(org, "quiet", outcome="failure").status_code == 409
    assert Session.objects.get(session_id="quiet").outcome is None


def test_another_tenants_session_takes_no_statement(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    add(other_org, "theirs")
    response = close(org, "theirs", outcome="failure", note=NOTE)
    missing = close(org, "nowhere", outcome="failure", note=NOTE)
    assert response.status_code == missing.status_code == 404
    assert response.json() == missing.json()
    assert Session.objects.get(session_id="theirs").outcome is None


def test_a_read_only_key_cannot_state_an_outcome(org: TenantFixture) -> None:
    add(org, "ro")
    _, key = org.new_key(read_only=True)
    assert close(org, "ro", api_client_with(key), outcome="success").status_code == 403
    assert Session.objects.get(session_id="ro").outcome is None


def test_the_notes_secrets_are_masked_unless_the_key_may_reveal_them(
    org: TenantFixture,
) -> None:
    add(org, "secret")
    closed = close(org, "secret", outcome="failure", note=SECRET_NOTE)
    assert "hunter2-garden" not in closed.content.decode()
    assert "then the export failed" in closed.json()["note"]
    for path in ("/sessions/secret", "/sessions"):
        assert "hunter2-garden" not in org.api.get(path, {"user_id": "sam"}).content.decode()
    revealing = api_client_with(api_key_create(client=org.client, reveals_secrets=True).plaintext)
    assert revealing.get("/sessions/secret", {"user_id": "sam"}).json()["note"] == SECRET_NOTE
    # Stored as written, as turns are.
    assert Session.objects.get(session_id="secret").note == SECRET_NOTE


def test_the_export_carries_the_statement_and_the_import_restores_it(
    org: TenantFixture, other_org: TenantFixture, tmp_path: Path
) -> None:
    add(org, "carried")
    assert close(org, "carried", outcome="partial", note=SECRET_NOTE).status_code == 200
    add(org, "unstated")
    assert close(org, "unstated").status_code == 200
    out = StringIO()
    call_command("export_user", org.organization.pk, "sam", stdout=out, stderr=StringIO())
    path = tmp_path / "export.jsonl"
    path.write_text(out.getvalue())
    call_command(
        "import_user",
        other_org.organization.pk,
        "moved",
        str(path),
        "--client",
        other_org.client.pk,
        stdout=StringIO(),
        stderr=StringIO(),
    )
    moved = Session.objects.filter(end_user__user_id="moved", client=other_org.client)
    assert {(s.session_id, s.outcome, s.note) for s in moved} == {
        ("carried", "partial", SECRET_NOTE),
        ("unstated", None, None),
    }
    # The API's export masks the note for a key that may not see secrets.
    response = org.api.get("/users/sam/export")
    lines = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    [carried] = [line for line in lines if line.get("session_id") == "carried"]
    assert carried["outcome"] == "partial"
    assert "hunter2-garden" not in carried["note"] and "export failed" in carried["note"]


def test_the_admin_shows_the_statement(client, org: TenantFixture) -> None:
    operator = get_user_model().objects.create_superuser("operator", "op@example.com", "pw")
    client.force_login(operator)
    add(org, "audited")
    assert close(org, "audited", outcome="failure", note=NOTE).status_code == 200
    session = Session.objects.get(session_id="audited")
    page = client.get(f"/admin/conversations/session/{session.pk}/change/").content.decode()
    assert NOTE in page and "failure" in page.lower()
    listing = client.get("/admin/conversations/session/", {"outcome__exact": "failure"})
    assert "audited" in listing.content.decode()
    succeeded = client.get("/admin/conversations/session/", {"outcome__exact": "success"})
    assert "audited" not in succeeded.content.decode()
