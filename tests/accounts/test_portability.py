"""Moving an end user: ``manage.py export_user`` / ``import_user`` and GET /users/{id}/export.
What goes in is the real API's and the real extraction's; what comes out is read from the
database and from the target organization's own search."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.apps import apps
from django.core.management import CommandError, call_command

from accounts.models import EndUser, UserImport, owned_models
from accounts.portability import portable_kinds, portable_skipped
from accounts.services import api_key_create
from memory.crypto import secret_decrypt
from memory.models import ExtractionJob, KnowledgeVaultItem
from memory.services import extraction_job_run
from memory.types import MEMORY_TYPES
from mirix_site.search.models import Posting
from sessions.models import Message, MessageImage, Session
from skills.models import Experience, ExperienceEmbedding, Skill, SkillEmbedding, SkillVersion
from tests.factories import (
    TenantFixture,
    api_client_with,
    chat_turns,
    data_url,
    experiences_create,
    memories_create,
    png_bytes,
    skill_create,
)

USER = "sam"

CONVERSATIONS = {
    "trip": (
        "We are planning a hiking trip to the Dolomites in July with my brother Leo",
        "Sounds great, the Dolomites are beautiful in July.",
        "Leo is allergic to peanuts so pack snacks without nuts",
        "Noted: nut-free snacks for Leo.",
    ),
    "work": (
        "The quarterly budget review moved to Friday afternoon at 3pm",
        "Friday 3pm, got it.",
        "My manager Priya wants the slides as a PDF at https://example.com/budget-slides",
        "I will prepare the PDF.",
    ),
    "home": (
        "My email is sam@example.com and the wifi password is hunter2-garden",
        "Stored.",
        "The guitar needs new strings before the concert on Saturday",
        "Strings before Saturday.",
    ),
}
QUERIES = [
    "hiking trip",
    "peanut allergy",
    "budget review Friday",
    "slides PDF",
    "guitar strings concert",
    "email address",
]


def _extract(owner: TenantFixture) -> None:
    """What the ingest worker does with the queued jobs (a test's transaction never commits,
    so their tasks are never published)."""
    for job in ExtractionJob.objects.filter(client=owner.client, status="queued"):
        extraction_job_run(organization_id=job.organization_id, job_id=job.pk)


def _seed(owner: TenantFixture, user_id: str = USER) -> None:
    for session_id, texts in CONVERSATIONS.items():
        response = owner.api.post(
            "/memory/add",
            {"user_id": user_id, "session_id": session_id, "messages": chat_turns(*texts)},
            format="json",
        )
        assert response.status_code == 202, response.json()
    response = owner.api.post(
        "/memory/add",
        {
            "user_id": user_id,
            "session_id": "photos",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Here is the trail map"},
                        {"type": "image_url", "image_url": {"url": data_url(png_bytes())}},
                    ],
                }
            ],
        },
        format="json",
    )
    assert response.status_code == 202, response.json()
    _extract(owner)
    memories_create(owner, user_id=user_id)  # core, semantic, procedural, vault besides
    first = experiences_create(owner, user_id=user_id)
    response = owner.api.post(
        "/experiences",
        {
            "user_id": user_id,
            "task": "fix the slow login",
            "action": "add an index on users.email",
            "outcome": "success",
            "supersedes": str(first.pk),
        },
        format="json",
    )
    assert response.status_code in (200, 201), response.json()
    skill = skill_create(owner, user_id=user_id)
    response = owner.api.patch(
        f"/skills/{skill.pk}", {"description": "Read CSV files, any encoding."}, format="json"
    )
    assert response.status_code == 200, response.json()


def _export(owner: TenantFixture, user_id: str = USER, *args: str) -> str:
    out, err = StringIO(), StringIO()
    call_command("export_user", owner.organization.pk, user_id, *args, stdout=out, stderr=err)
    assert err.getvalue().startswith(f"Exported {user_id} of {owner.organization.pk}:")
    return out.getvalue()


def _import(
    target: TenantFixture, text: str, tmp_path: Path, user_id: str = "moved", *args: str
) -> str:
    path = tmp_path / "export.jsonl"
    path.write_text(text)
    out = StringIO()
    call_command(
        "import_user",
        target.organization.pk,
        user_id,
        str(path),
        "--client",
        target.client.pk,
        *args,
        stdout=out,
        stderr=StringIO(),
    )
    return out.getvalue()


def _table_counts() -> dict[str, int]:
    return {model._meta.label: model.objects.count() for model in apps.get_models()}


def _rows_of(user: EndUser, model: type) -> list:
    return list(model.objects.filter(end_user=user).order_by("pk"))


def test_every_owned_model_is_exported_or_left_out_with_a_reason() -> None:
    carried = {kind.model for kind in portable_kinds()}
    skipped = portable_skipped()
    assert [m._meta.label for m in owned_models() if m not in carried | skipped.keys()] == []
    assert all(reason.strip() for reason in skipped.values())


def test_an_export_imported_elsewhere_holds_the_same_rows_relinked(
    org: TenantFixture, other_org: TenantFixture, tmp_path: Path
) -> None:
    _seed(org)
    text = _export(org)
    lines = [json.loads(line) for line in text.splitlines()]
    assert lines[0]["kind"] == "header" and lines[0]["user_id"] == USER
    assert lines[-1]["kind"] == "end"
    assert not any("embedding" in key for line in lines for key in line)  # no vectors
    kinds = [line["kind"] for line in lines[1:-1]]
    assert kinds == sorted(kinds, key=[kind.name for kind in portable_kinds()].index)

    summary = _import(other_org, text, tmp_path)
    assert "Imported export" in summary

    source = EndUser.objects.get(organization=org.organization, user_id=USER)
    target = EndUser.objects.get(organization=other_org.organization, user_id="moved")
    models = [Session, Message, MessageImage, Experience, Skill, SkillVersion]
    models += [memory_type.model for memory_type in MEMORY_TYPES.values()]
    for model in models:
        assert len(_rows_of(target, model)) == len(_rows_of(source, model)) > 0, model
        assert {row.client_id for row in _rows_of(target, model)} == {other_org.client.pk}

    def turns(user: EndUser) -> dict[int, tuple[str, str]]:
        return {
            message.pk: (message.session.session_id, message.text)
            for message in Message.objects.filter(end_user=user).select_related("session")
        }

    # Provenance names the same turns, by their new ids.
    for memory_type in MEMORY_TYPES.values():
        if not memory_type.cites_sources:
            continue

        def cited(user: EndUser, model: type = memory_type.model) -> list:
            messages = turns(user)
            return sorted(
                (row.fingerprint, sorted(messages[pk] for pk in row.source_message_ids))
                for row in _rows_of(user, model)
            )

        assert cited(target) == cited(source), memory_type.name
    # The image travelled and the turn shows it in the new organization.
    [link] = MessageImage.objects.filter(end_user=target)
    assert link.image.organization_id == other_org.organization.pk
    part = Message.objects.get(pk=link.message_id).content[link.part]
    assert part == {"type": "image", "image_id": link.image.sha256}
    # What superseded what, and the versions of the skill.
    superseded = Experience.objects.get(end_user=target, superseded_by__isnull=False)
    assert superseded.superseded_by.action == "add an index on users.email"
    assert [v.number for v in SkillVersion.objects.filter(end_user=target)] == [1, 2]

    # The vault's value travelled encrypted and still opens.
    def secrets(user: EndUser) -> list[str]:
        rows = _rows_of(user, KnowledgeVaultItem)
        return sorted(secret_decrypt(row.secret_value_encrypted) for row in rows)

    assert secrets(target) == secrets(source)
    vault_lines = [line for line in text.splitlines() if '"kind":"knowledge_vault"' in line]
    for original in _rows_of(source, KnowledgeVaultItem):
        assert original.secret_value_encrypted in text
        assert secret_decrypt(original.secret_value_encrypted) not in "".join(vault_lines)
    # Indexed and embedded as the rows written here are.
    for memory_type in MEMORY_TYPES.values():
        if memory_type.kind is not None:
            embeddings = memory_type.kind.embedding_model.objects
            assert embeddings.filter(end_user=target).count() == (
                embeddings.filter(end_user=source).count()
            ), memory_type.name
    assert ExperienceEmbedding.objects.filter(end_user=target).count() == 3
    assert SkillEmbedding.objects.filter(end_user=target).count() == 1
    assert Posting.objects.filter(end_user=target).count() == (
        Posting.objects.filter(end_user=source).count()
    )


def _top(owner: TenantFixture, user_id: str, query: str, memory_type: str) -> list[str]:
    response = owner.api.get(
        "/memory/search",
        {
            "user_id": user_id,
            "query": query,
            "memory_type": memory_type,
            "search_method": "hybrid",
            "limit": 10,
        },
    )
    assert response.status_code == 200, response.json()
    keys = ("summary", "name", "title", "caption", "details", "content")
    return [json.dumps([result.get(key) for key in keys]) for result in response.json()["results"]]


def test_an_imported_user_gets_the_same_answers_in_another_organization(
    org: TenantFixture, other_org: TenantFixture, tmp_path: Path
) -> None:
    """The acceptance test: the API's export of a user seeded through the API, imported into
    another organization, answers every query with the same top ten."""
    _seed(org)
    response = org.api.get(f"/users/{USER}/export")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-ndjson"
    text = b"".join(response.streaming_content).decode()
    _import(other_org, text, tmp_path, USER)

    compared = 0
    for query in QUERIES:
        for memory_type in ("episodic", "semantic", "procedural", "resource", "knowledge_vault"):
            before = _top(org, USER, query, memory_type)
            assert _top(other_org, USER, query, memory_type) == before, (query, memory_type)
            compared += len(before)
    assert compared > 20

    def skills(owner: TenantFixture) -> list[str]:
        response = owner.api.post(
            "/skills/retrieve", {"user_id": USER, "task": "load a csv file"}, format="json"
        )
        assert response.status_code == 200, response.json()
        return [skill["name"] for skill in response.json()["skills"]]

    assert skills(other_org) == skills(org) == ["read-csv-files"]


def test_a_dry_run_counts_and_changes_nothing(
    org: TenantFixture, other_org: TenantFixture, tmp_path: Path
) -> None:
    _seed(org)
    text = _export(org)
    before = _table_counts()
    summary = _import(other_org, text, tmp_path, "moved", "--dry-run")
    assert _table_counts() == before
    assert "Nothing was changed" in summary
    end = json.loads(text.splitlines()[-1])
    for kind, count in end["counts"].items():
        assert any(line.split() == [kind, f"{count:,}"] for line in summary.splitlines()), kind
    assert not EndUser.objects.filter(user_id="moved").exists()


def test_a_bad_line_refuses_the_whole_file_naming_it(
    org: TenantFixture, other_org: TenantFixture, tmp_path: Path
) -> None:
    _seed(org)
    lines = _export(org).splitlines()
    number = next(n for n, line in enumerate(lines, 1) if '"kind":"semantic"' in line)
    bad = json.loads(lines[number - 1])
    bad["summary"] = ""
    broken = [*lines[: number - 1], json.dumps(bad), *lines[number:]]
    before = _table_counts()
    with pytest.raises(CommandError, match=rf"line {number} \(semantic\): summary: "):
        _import(other_org, "\n".join(broken), tmp_path)
    assert _table_counts() == before

    with pytest.raises(CommandError, match="line 2: not JSON"):
        _import(other_org, "\n".join([lines[0], "{oops", *lines[1:]]), tmp_path)
    with pytest.raises(CommandError, match="without its end line: cut short"):
        _import(other_org, "\n".join(lines[:-1]), tmp_path)
    message = next(n for n, line in enumerate(lines, 1) if '"kind":"message"' in line)
    with pytest.raises(CommandError, match=r"line 2 \(message\): session: names"):
        _import(other_org, "\n".join(lines[:1] + lines[message - 1 :]), tmp_path)
    assert _table_counts() == before


def test_memories_of_a_file_without_turn_tags_are_found_by_their_tags(
    org: TenantFixture, other_org: TenantFixture, tmp_path: Path
) -> None:
    # A file written before memories kept their turns' tags (memory.tags).
    response = org.api.post(
        "/memory/add",
        {
            "user_id": USER,
            "messages": chat_turns("We ship the kayak rental app in June", "Great news"),
            "filter_tags": {"project": "kayak"},
        },
        format="json",
    )
    assert response.status_code == 202, response.json()
    _extract(org)
    records = [json.loads(line) for line in _export(org).splitlines()]
    for record in records:
        if record.get("kind") in MEMORY_TYPES:
            record.pop("turn_tags", None)
    episodic = next(record for record in records if record.get("kind") == "episodic")

    episodic["turn_tags"] = "project kayak"
    text = "\n".join(json.dumps(record) for record in records)
    with pytest.raises(CommandError, match=r"\(episodic\): turn_tags: A list of tag objects"):
        _import(other_org, text, tmp_path, USER)
    del episodic["turn_tags"]
    _import(other_org, "\n".join(json.dumps(record) for record in records), tmp_path, USER)

    response = other_org.api.get(
        "/memory/search",
        {
            "user_id": USER,
            "query": "kayak",
            "memory_type": "episodic",
            "filter_tags": '{"project": "kayak"}',
        },
    )
    [found] = response.json()["results"]
    assert found["turn_tags"] == [{"project": "kayak"}]


def test_a_file_imported_twice_is_refused(
    org: TenantFixture, other_org: TenantFixture, tmp_path: Path
) -> None:
    experiences_create(org, user_id=USER)
    text = _export(org)
    _import(other_org, text, tmp_path)
    before = _table_counts()
    with pytest.raises(CommandError, match="was imported into moved"):
        _import(other_org, text, tmp_path)
    assert _table_counts() == before
    assert UserImport.objects.filter(end_user__user_id="moved").count() == 1
    # Into another user it is a copy, not a duplicate.
    _import(other_org, text, tmp_path, "copy")
    assert Experience.objects.filter(end_user__user_id="copy").count() == 2


def test_the_api_exports_the_callers_own_rows_only(org: TenantFixture) -> None:
    experiences_create(org, user_id=USER)
    second = org.another_client("second")
    response = second.api.post(
        "/experiences",
        {
            "user_id": USER,
            "task": "second's task",
            "action": "second's action",
            "outcome": "success",
        },
        format="json",
    )
    assert response.status_code in (200, 201)

    def exported(owner: TenantFixture, api=None) -> list[dict]:
        response = (api or owner.api).get(f"/users/{USER}/export")
        assert response.status_code == 200
        return [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]

    tasks = [line["task"] for line in exported(org) if line["kind"] == "experience"]
    assert tasks == ["fix the slow login"] * 2
    assert [line["task"] for line in exported(second) if line["kind"] == "experience"] == [
        "second's task"
    ]
    # A read-only key reads it too.
    _, key = org.new_key(read_only=True)
    assert exported(org, api_client_with(key))[-1]["counts"] == {"experience": 2}
    # The operator's export holds both clients' rows.
    assert json.loads(_export(org).splitlines()[-1])["counts"] == {"experience": 3}


def test_the_api_answers_a_missing_or_foreign_user_as_missing(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    experiences_create(other_org, user_id="bobs-user")
    missing = org.api.get("/users/nobody/export")
    foreign = org.api.get("/users/bobs-user/export")
    assert missing.status_code == foreign.status_code == 404
    assert missing.json() == foreign.json()
    assert api_client_with(None).get("/users/bobs-user/export").status_code == 401


def test_the_api_masks_the_turns_secrets_unless_the_key_may_reveal_them(
    org: TenantFixture,
) -> None:
    response = org.api.post(
        "/memory/add",
        {"user_id": USER, "messages": chat_turns("the wifi password is hunter2-garden", "ok")},
        format="json",
    )
    assert response.status_code == 202

    def exported(api) -> str:
        response = api.get(f"/users/{USER}/export")
        assert response.status_code == 200
        return b"".join(response.streaming_content).decode()

    masked = exported(org.api)
    assert "hunter2-garden" not in masked
    assert json.loads(masked.splitlines()[0])["secrets_masked"] is True
    revealing = api_key_create(client=org.client, reveals_secrets=True).plaintext
    assert "hunter2-garden" in exported(api_client_with(revealing))
