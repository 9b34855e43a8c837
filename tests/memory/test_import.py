"""POST /memory/import: turns in bulk, NDJSON streamed or one JSON body; every turn stored once
however often its line is sent (a retry, two imports of one file at once, the file sent again
after a cut); a bad line refused with its number while the others are imported; the import's
progress on its row."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
from django.db import connection

from memory.models import (
    CoreMemoryBlock,
    EpisodicMemory,
    ExtractionJob,
    MemoryImport,
    SemanticMemory,
)
from sessions.models import Message, Session
from tests import processes
from tests.factories import TenantFixture, tenant_fixture


def line(number: int, *, user: str = "ana", session: str = "s1", **extra: Any) -> dict[str, Any]:
    return {
        "user_id": user,
        "session_id": session,
        "role": "user" if number % 2 else "assistant",
        "content": f"turn {number} of {session}",
        "client_message_id": f"{user}/{session}/{number}",
        "occurred_at": f"2024-03-01T10:{number // 60 % 60:02d}:{number % 60:02d}Z",
        **extra,
    }


def ndjson(lines: list[Any]) -> bytes:
    return b"".join(
        (text if isinstance(text, bytes) else json.dumps(text).encode()) + b"\n" for text in lines
    )


def send(org: TenantFixture, body: bytes, **params: Any):
    query = "&".join(f"{name}={value}" for name, value in params.items())
    return org.api.generic(
        "POST",
        f"/memory/import?{query}" if query else "/memory/import",
        body,
        content_type="application/x-ndjson",
    )


def stored(client_id: int | None = None) -> set[tuple[Any, ...]]:
    """Every turn as what a client would compare: whose, where, in which order, what."""
    rows = Message.objects.all() if client_id is None else Message.objects.filter(client=client_id)
    return {
        (row.end_user.user_id, row.session.session_id, row.position, row.role, row.text,
         row.client_message_id, row.occurred_at.isoformat())
        for row in rows.select_related("end_user", "session")
    }  # fmt: skip


def test_an_ndjson_import_stores_each_turn_in_its_session_at_its_time(
    org: TenantFixture,
) -> None:
    lines = [line(n) for n in range(3)] + [line(n, user="bea", session="s9") for n in range(2)]
    response = send(org, ndjson(lines), import_id="move-1", expected_lines=10)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["import_id"] == "move-1"
    assert (body["lines_read"], body["turns_stored"], body["turns_found"]) == (5, 5, 0)
    assert body["refused"] == [] and body["more"] is False
    job = body["job"]
    assert (job["state"], job["requests"], job["lines_read"], job["expected_lines"]) == (
        "idle",
        1,
        5,
        10,
    )
    texts = [m.text for m in Message.objects.filter(session__session_id="s1").order_by("position")]
    assert texts == ["turn 0 of s1", "turn 1 of s1", "turn 2 of s1"]
    first = Message.objects.get(client_message_id="ana/s1/1")
    assert first.occurred_at.isoformat() == "2024-03-01T10:00:01+00:00"
    assert first.extraction == Message.Extraction.PENDING
    assert ExtractionJob.objects.filter(status="queued").count() == 2  # one per user
    assert MemoryImport.objects.get(import_id="move-1").turns_stored == 5


def test_a_line_twice_and_a_file_sent_again_store_each_turn_once(org: TenantFixture) -> None:
    lines = [line(n) for n in range(4)]
    first = send(org, ndjson([*lines, lines[1]]), import_id="again").json()
    assert (first["turns_stored"], first["turns_found"]) == (4, 1)
    before = stored()
    second = send(org, ndjson(lines), import_id="again").json()
    assert (second["turns_stored"], second["turns_found"]) == (0, 4)
    assert stored() == before
    assert Session.objects.get(session_id="s1").message_count == 4
    job = second["job"]
    assert (job["requests"], job["lines_read"], job["turns_stored"], job["turns_found"]) == (
        2,
        9,
        4,
        5,
    )


def test_a_bad_line_is_refused_with_its_number_and_the_others_are_imported(
    org: TenantFixture,
) -> None:
    body = ndjson(
        [
            line(0),
            b"{not json",
            line(1),
            {**line(2), "role": "narrator"},
            {key: value for key, value in line(3).items() if key != "client_message_id"},
            [1, 2],
            {**line(4), "occurred_at": "yesterday"},
            b"\xff\xfe",
            {key: value for key, value in line(5).items() if key != "user_id"},
            line(6),
        ]
    )
    answer = send(org, body).json()
    assert answer["turns_stored"] == 3
    refused = {item["line"]: item["errors"] for item in answer["refused"]}
    assert sorted(refused) == [2, 4, 5, 6, 7, 8, 9]
    assert refused[2] == {"line": ["Not a JSON object."]}
    assert "role" in refused[4]
    assert "client_message_id" in refused[5]
    assert refused[6] == {"line": ["Not a JSON object."]}
    assert "occurred_at" in refused[7]
    assert refused[8] == {"line": ["Not UTF-8 text."]}
    assert "user_id" in refused[9]
    assert {m.client_message_id for m in Message.objects.all()} == {
        "ana/s1/0",
        "ana/s1/1",
        "ana/s1/6",
    }
    job = MemoryImport.objects.get(import_id=answer["import_id"])
    assert job.lines_refused == 7
    assert [item["line"] for item in job.refusals] == [2, 4, 5, 6, 7, 8, 9]


def test_the_requests_user_is_the_default_of_lines_naming_none(org: TenantFixture) -> None:
    lines = [{k: v for k, v in line(n).items() if k != "user_id"} for n in range(2)]
    answer = send(org, ndjson(lines), user_id="cy").json()
    assert answer["turns_stored"] == 2
    assert set(Message.objects.values_list("end_user__user_id", flat=True)) == {"cy"}


def test_lines_past_the_limit_are_left_for_the_next_request(org: TenantFixture, settings) -> None:
    settings.IMPORT_MAX_LINES = 3
    lines = [line(n) for n in range(5)]
    first = send(org, ndjson(lines), import_id="big").json()
    assert (first["lines_read"], first["more"]) == (3, True)
    rest = send(org, ndjson(lines[3:]), import_id="big").json()
    assert (rest["lines_read"], rest["more"]) == (2, False)
    assert Message.objects.count() == 5


def test_a_session_that_refuses_turns_refuses_their_lines(org: TenantFixture) -> None:
    org.api.post(
        "/memory/add",
        {"user_id": "ana", "session_id": "done", "messages": [{"role": "user", "content": "x"}]},
        format="json",
    )
    org.api.post("/sessions/done/close", {"user_id": "ana"}, format="json")
    answer = send(org, ndjson([line(0, session="done"), line(0, session="open")])).json()
    assert answer["turns_stored"] == 1
    assert [item["line"] for item in answer["refused"]] == [1]
    assert "closed" in answer["refused"][0]["errors"]["session_id"][0]


def test_the_json_form_takes_the_lines_in_a_list(org: TenantFixture) -> None:
    response = org.api.post(
        "/memory/import?import_id=j", {"lines": [line(0), line(1), "x"]}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["turns_stored"] == 2
    assert [item["line"] for item in response.json()["refused"]] == [3]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("import_id=%20x", "import_id"),
        ("expected_lines=0", "expected_lines"),
        # Past a bigint, which every integer field refuses (schemathesis found it a 500).
        (f"expected_lines={2**63}", "expected_lines"),
        ("user_id=a/b", "user_id"),
    ],
)
def test_bad_parameters_are_422_and_store_nothing(
    org: TenantFixture, query: str, field: str
) -> None:
    response = org.api.generic(
        "POST", f"/memory/import?{query}", ndjson([line(0)]), content_type="application/x-ndjson"
    )
    assert response.status_code == 422
    assert field in response.json()["fields"]
    assert not Message.objects.exists() and not MemoryImport.objects.exists()


def test_a_body_of_another_type_is_415(org: TenantFixture) -> None:
    response = org.api.generic("POST", "/memory/import", b"a,b\n", content_type="text/csv")
    assert response.status_code == 415
    assert not MemoryImport.objects.exists()


def test_imports_are_the_clients_own(org: TenantFixture) -> None:
    send(org, ndjson([line(0)]), import_id="shared-name")
    other = org.another_client("other app")
    answer = send(other, ndjson([line(0)]), import_id="shared-name").json()
    # Another client's turn of the same id is its own; the import names are per client.
    assert (answer["turns_stored"], answer["job"]["requests"]) == (1, 1)
    assert Message.objects.count() == 2


def test_two_imports_of_one_file_at_once_store_each_line_once(transactional_db: None) -> None:
    owner = tenant_fixture("alice")
    assert send(owner, ndjson([line(999, session="warm")])).status_code == 200  # the user exists
    facts = [
        memory_line("semantic", name=f"fact {n}", summary=f"Ana likes colour number {n}")
        for n in range(20)
    ]
    body = ndjson([line(n, session=f"s{n % 3}") for n in range(60)] + facts)
    answers: list[dict[str, Any]] = []

    def run() -> None:
        try:
            answers.append(send(owner, body).json())
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sum(answer["turns_stored"] for answer in answers) == 60
    assert sum(answer["turns_found"] for answer in answers) == 60
    assert sum(answer["memories_stored"] for answer in answers) == 20
    assert sum(answer["memories_found"] for answer in answers) == 20
    assert SemanticMemory.objects.count() == 20
    assert Message.objects.exclude(session__session_id="warm").count() == 60
    for session in Session.objects.exclude(session_id="warm"):
        positions = sorted(session.messages.values_list("position", flat=True))
        assert positions == list(range(len(positions)))


@pytest.fixture(scope="module")
def web_url(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with processes.web_server(tmp_path_factory.mktemp("web"), workers=1) as web:
        yield web.url


def _cut_request(url: str, key: str, body: bytes, *, sent: int) -> None:
    """The request as a client cut off mid-way sends it: the whole length announced, ``sent``
    bytes of the body, then the connection closed without waiting for an answer."""
    parts = urlsplit(url)
    head = (
        f"POST /memory/import?import_id=cut HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        f"X-API-Key: {key}\r\nContent-Type: application/x-ndjson\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(head + body[:sent])


def test_an_import_cut_off_and_sent_again_ends_as_one_sent_whole(
    web_url: str, transactional_db: None
) -> None:
    """A retry after a timeout: the first request is cut mid-file (the server stores what it
    read), the client sends the file again; the rows are those of one uninterrupted import
    (compared with the same file imported whole by another client)."""
    cut, whole = tenant_fixture("alice"), tenant_fixture("bob")
    body = ndjson([line(n, session=f"s{n // 150}") for n in range(450)])
    _cut_request(web_url, cut.key, body, sent=len(body) // 2)

    def retry() -> dict[str, Any]:
        response = requests.post(
            f"{web_url}/memory/import?import_id=cut",
            data=body,
            headers={"X-API-Key": cut.key, "Content-Type": "application/x-ndjson"},
            timeout=120,
        )
        assert response.status_code == 200, response.text
        return response.json()

    # The cut request finishes what it read before the retry is judged (its row goes idle).
    deadline = time.monotonic() + 60
    while not MemoryImport.objects.filter(import_id="cut", state="idle").exists():
        assert time.monotonic() < deadline, "the cut request never ended"
        time.sleep(0.2)
    resumed = retry()
    assert resumed["turns_found"] > 0 and resumed["turns_stored"] > 0
    assert resumed["turns_found"] + resumed["turns_stored"] == 450
    requests.post(
        f"{web_url}/memory/import",
        data=body,
        headers={"X-API-Key": whole.key, "Content-Type": "application/x-ndjson"},
        timeout=120,
    ).raise_for_status()
    assert stored(cut.client.pk) == stored(whole.client.pk)
    assert len(stored(cut.client.pk)) == 450


def test_the_admin_shows_an_imports_progress(admin_client, org: TenantFixture) -> None:
    send(org, ndjson([line(0), b"nope"]), import_id="watched", expected_lines=1000)
    job = MemoryImport.objects.get(import_id="watched")
    page = admin_client.get(f"/admin/memory/memoryimport/{job.pk}/change/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "watched" in text and "Not a JSON object." in text
    listing = admin_client.get("/admin/memory/memoryimport/").content.decode()
    assert "watched" in listing


def test_the_eta_is_the_rate_so_far_against_the_lines_announced(org: TenantFixture) -> None:
    send(org, ndjson([line(n) for n in range(10)]), import_id="eta", expected_lines=40)
    job = MemoryImport.objects.get(import_id="eta")
    spent = (job.updated_at - job.created_at).total_seconds()
    assert job.eta_seconds == pytest.approx(30 * spent / 10, abs=0.1)
    MemoryImport.objects.filter(pk=job.pk).update(expected_lines=10)
    job.refresh_from_db()
    assert job.eta_seconds is None


def memory_line(memory_type: str, **fields: Any) -> dict[str, Any]:
    return {"user_id": "ana", "memory_type": memory_type, **fields}


def test_ready_memories_are_stored_found_by_search_and_not_stored_twice(
    org: TenantFixture,
) -> None:
    lines = [
        memory_line(
            "semantic",
            name="allergy",
            summary="Ana is allergic to penicillin; write to ana@example.com",
            client_memory_id="fact-1",
        ),
        memory_line(
            "episodic",
            summary="Ana moved to Lyon",
            occurred_at="2023-05-02T09:00:00Z",
            filter_tags={"project": "move"},
        ),
        memory_line("core", label="human", value="Name: Ana"),
        line(0),
    ]
    first = send(org, ndjson(lines), import_id="mem").json()
    assert (first["memories_stored"], first["memories_found"], first["turns_stored"]) == (3, 0, 1)
    assert first["refused"] == []
    fact = SemanticMemory.objects.get()
    assert "<email>" in fact.summary and "ana@example.com" not in fact.summary
    episode = EpisodicMemory.objects.get()
    assert episode.occurred_at.isoformat() == "2023-05-02T09:00:00+00:00"
    assert episode.filter_tags == {"project": "move"}
    assert CoreMemoryBlock.objects.get(label="human").value == "Name: Ana"
    # Searchable once the answer is back: indexed and embedded in the batch's transaction.
    found = org.api.get(
        "/memory/search",
        {"user_id": "ana", "query": "penicillin allergy", "memory_type": "semantic"},
    ).json()
    assert [item["id"] for item in found["results"]] == [str(fact.pk)]
    # Sent again, one of them edited under its own id: found, none stored twice.
    lines[0] = {**lines[0], "summary": "Ana is allergic to penicillin and to aspirin"}
    again = send(org, ndjson(lines), import_id="mem").json()
    assert (again["memories_stored"], again["memories_found"], again["turns_found"]) == (0, 3, 1)
    assert SemanticMemory.objects.count() == EpisodicMemory.objects.count() == 1
    job = MemoryImport.objects.get(import_id="mem")
    assert (job.memories_stored, job.memories_found) == (3, 3)


def test_a_memory_line_lacking_what_its_type_needs_is_refused(org: TenantFixture) -> None:
    answer = send(
        org,
        ndjson(
            [
                memory_line("semantic", summary="no name"),
                memory_line("dream", summary="x"),
                memory_line("resource", title="Design doc", client_memory_id=" bad"),
                {k: v for k, v in memory_line("episodic", summary="x").items() if k != "user_id"},
                memory_line("resource", title="Design doc", uri="https://example.com/d"),
            ]
        ),
    ).json()
    refused = {item["line"]: item["errors"] for item in answer["refused"]}
    assert refused[1] == {"fields": ["A semantic memory needs name, summary."]}
    assert "memory_type" in refused[2]
    assert "client_memory_id" in refused[3]
    assert "user_id" in refused[4]
    assert answer["memories_stored"] == 1


def test_a_line_names_its_session_as_an_add_does(org: TenantFixture) -> None:
    """In filter_tags.session_id (as MIRIX clients do) or session_id, equal if both; a task
    turn needs one."""
    answer = send(
        org,
        ndjson(
            [
                {**line(0), "session_id": None, "filter_tags": {"session_id": "tagged"}},
                {**line(1), "session_id": None, "session_tag": "task"},
                {**line(2), "filter_tags": {"session_id": "other"}},
            ]
        ),
    ).json()
    assert answer["turns_stored"] == 1
    assert Message.objects.get().session.session_id == "tagged"
    refused = {item["line"]: item["errors"] for item in answer["refused"]}
    assert "session_id" in refused[2] and "filter_tags.session_id" in refused[3]
