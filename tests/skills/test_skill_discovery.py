"""Skills discovery: the user's skills at ``/.well-known/agent-skills/index.json`` (the Agent
Skills discovery RFC's path) answer as ``/skills/index.json`` does, each entry as the RFC asks;
``import_skills`` imports a discovery index from a file or an http URL (through the SSRF guard),
each SKILL.md checked against its digest (either spelling), read back as the export wrote it and
written as a version authored ``import``, redacted; a dry run writes nothing."""

from __future__ import annotations

import hashlib
import json
import re
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from skills_ref.parser import parse_frontmatter

from accounts.services import end_user_create_or_get
from skills.content import SkillContent
from skills.export import DISCOVERY_SCHEMA, skill_md, skill_md_read
from skills.models import Skill, SkillVersion
from skills.services.skills import Provenance, skill_version_write
from tests.accounts.test_tenancy import rows_of
from tests.factories import TenantFixture
from tests.loopback import LoopbackServer, Reply

TOKEN = "ghp_" + "R4nd0mT0k3nV4lu3" * 2 + "Xy12"
CSV = SkillContent(
    name="read-csv-files",
    description="Read CSV files whatever their encoding.\nUse it when a load fails.",
    triggers=("load a csv file", "open the export " + "with many columns " * 20),
    instructions="# Reading CSV\n\n1. Try utf-8, then latin-1.\n2. Sniff the delimiter.",
    pitfalls=("A BOM reads as part of the first header.", "Excel's export\nuses semicolons."),
)
DEPLOY = SkillContent(
    name="deploy-the-site",
    description="Deploy the site to production.",
    instructions="# Deploying\n\n## Pitfalls\n- a heading of its own\n\nThen: make deploy",
)


def _skill(owner: TenantFixture, *, user_id: str, content: SkillContent) -> Skill:
    end_user, _ = end_user_create_or_get(tenant=owner.tenant, user_id=user_id, name=None)
    return skill_version_write(
        owner=owner.tenant.owner_ids(end_user),
        skill=None,
        content=content,
        provenance=Provenance(author=SkillVersion.Author.OPERATOR, operation="create"),
        embedders=[],
    ).skill


def _run(*args: str) -> list[str]:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().splitlines()


def _run_refusing(*args: str) -> tuple[list[str], str]:
    """A run that refused some entry: its report, and the error it ended with."""
    out = StringIO()
    with pytest.raises(CommandError) as failed:
        call_command(*args, stdout=out)
    return out.getvalue().splitlines(), str(failed.value)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _content(skill: Skill) -> tuple[str, str, str, list[str]]:
    return (skill.name, skill.description, skill.instructions, skill.pitfalls)


# --- GET /.well-known/agent-skills/index.json ---------------------------------------------------


def test_the_well_known_index_is_the_skills_index_and_follows_the_rfc(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    for content in (CSV, DEPLOY):
        _skill(org, user_id="agent-user", content=content)
    _skill(other_org, user_id="agent-user", content=CSV)

    well_known = org.api.get("/.well-known/agent-skills/index.json", {"user_id": "agent-user"})
    index = org.api.get("/skills/index.json", {"user_id": "agent-user"})
    assert well_known.status_code == 200 and index.status_code == 200
    assert well_known.json() == index.json()
    assert well_known["Content-Type"] == "application/json"
    assert well_known["Cache-Control"] == "private, no-cache"
    # The RFC: servers support HEAD as well as GET.
    head = org.api.head("/.well-known/agent-skills/index.json", {"user_id": "agent-user"})
    assert head.status_code == 200

    body = well_known.json()
    assert body["$schema"] == DISCOVERY_SCHEMA
    assert [entry["name"] for entry in body["skills"]] == ["deploy-the-site", "read-csv-files"]
    for entry in body["skills"]:
        assert entry["type"] == "skill-md"
        assert entry["url"].startswith("http://testserver/skills/")
        served = org.api.get(entry["url"])
        assert served.status_code == 200 and served["Content-Type"].startswith("text/markdown")
        assert entry["digest"] == "sha256:" + _sha256(served.content)
        # The entry's description is its SKILL.md's, as the reference parser reads it (the
        # RFC: it SHOULD match); a description on two lines is one line in both.
        front_matter, _body = parse_frontmatter(served.content.decode())
        assert entry["description"] == front_matter["description"]
    assert body["skills"][1]["description"] == (
        "Read CSV files whatever their encoding. Use it when a load fails."
    )

    # Another organization's key naming this user names its own user (its one skill).
    theirs = other_org.api.get("/.well-known/agent-skills/index.json", {"user_id": "agent-user"})
    assert [entry["name"] for entry in theirs.json()["skills"]] == ["read-csv-files"]
    assert theirs.json()["skills"][0]["url"] != body["skills"][1]["url"]
    missing = org.api.get("/.well-known/agent-skills/index.json", {"user_id": "nobody"})
    assert missing.status_code == 404


# --- SKILL.md read back -------------------------------------------------------------------------


@pytest.mark.parametrize("content", [CSV, DEPLOY], ids=["lists", "own-headings"])
def test_a_skill_md_reads_back_as_the_skill_it_was_written_from(content: SkillContent) -> None:
    skill = Skill(**content.snapshot(), version=3, status="active")
    read = skill_md_read(skill_md(skill, confidence=0.5))
    assert read.content.name == content.name
    assert read.content.description == " ".join(content.description.split())
    assert read.content.instructions == content.instructions
    assert read.content.pitfalls == content.pitfalls
    # A quoted phrasing is cut at 200 characters: a short one comes back whole.
    assert len(read.content.triggers) == len(content.triggers)
    assert read.content.triggers[:1] == content.triggers[:1]
    assert read.metadata["version"] == "3" and read.metadata["status"] == "active"


def test_a_skill_md_written_elsewhere_keeps_its_sections_in_the_instructions() -> None:
    text = (
        "---\nname: pdf-processing\ndescription: >\n  Extract text from PDFs.\n"
        "license: MIT\n---\n\n# PDF\n\n## When to use\n- When a PDF is attached\n\n"
        "## Pitfalls\n- Scanned pages hold no text\n\n## Examples\nSee below.\n"
    )
    read = skill_md_read(text)
    assert read.content.name == "pdf-processing"
    assert read.content.description == "Extract text from PDFs."
    assert read.content.triggers == () and read.content.pitfalls == ()
    assert read.content.instructions.startswith("# PDF\n\n## When to use\n- When a PDF")
    assert read.content.instructions.endswith("## Examples\nSee below.")


# --- import_skills from a file ------------------------------------------------------------------


def _skill_md_file(folder: Path, content: SkillContent) -> bytes:
    data = skill_md(Skill(**content.snapshot(), version=1), confidence=0.25).encode()
    (folder / content.name).mkdir(parents=True)
    (folder / content.name / "SKILL.md").write_bytes(data)
    return data


def _index_file(folder: Path, entries: list[dict[str, object]], **top: object) -> str:
    path = folder / "index.json"
    path.write_text(json.dumps({"$schema": DISCOVERY_SCHEMA, **top, "skills": entries}))
    return str(path)


def test_import_from_a_file_takes_both_digest_spellings_and_refuses_what_does_not_match(
    org: TenantFixture, tmp_path: Path
) -> None:
    user, _ = end_user_create_or_get(tenant=org.tenant, user_id="agent-user", name=None)
    secret = SkillContent(
        name="call-the-api",
        description="Call the billing API.",
        instructions=f"# Calling\n\nexport TOKEN={TOKEN}\ncurl the endpoint",
    )
    tampered = SkillContent(name="tampered", description="Changed after its index was written.")
    csv, deploy, secret_md = (_skill_md_file(tmp_path, c) for c in (CSV, DEPLOY, secret))
    tampered_md = _skill_md_file(tmp_path, tampered)
    _skill_md_file(tmp_path, SkillContent(name="unsigned", description="No digest given."))
    entries = [
        {
            "name": "read-csv-files",
            "type": "skill-md",
            "url": "read-csv-files/SKILL.md",
            "digest": "sha256:" + _sha256(csv),
            "description": "x",
        },
        {
            "name": "deploy-the-site",
            "type": "skill-md",
            "url": "deploy-the-site/SKILL.md",
            "sha256": _sha256(deploy).upper(),
        },
        {
            "name": "call-the-api",
            "type": "skill-md",
            "url": "call-the-api/SKILL.md",
            "digest": "sha256:" + _sha256(secret_md),
        },
        {
            "name": "tampered",
            "type": "skill-md",
            "url": "tampered/SKILL.md",
            "digest": "sha256:" + "0" * 64,
        },
        {"name": "unsigned", "type": "skill-md", "url": "unsigned/SKILL.md"},
        {
            "name": "escaping",
            "type": "skill-md",
            "url": "../elsewhere/SKILL.md",
            "sha256": "0" * 64,
        },
        {
            "name": "wrangler",
            "type": "archive",
            "url": "wrangler.tar.gz",
            "digest": "sha256:" + "1" * 64,
        },
    ]
    index = _index_file(tmp_path, entries)

    lines, error = _run_refusing("import_skills", org.organization.pk, "agent-user", index)

    assert lines[:3] == [
        "  read-csv-files: created",
        "  deploy-the-site: created",
        "  call-the-api: created",
    ]
    assert lines[3] == (
        f"  tampered: refused (Its SKILL.md's digest is sha256:{_sha256(tampered_md)}, "
        f"the index says sha256:{'0' * 64}.)"
    )
    assert lines[4] == (
        '  unsigned: refused (It gives no digest ("digest": "sha256:<hex>" or "sha256": "<hex>").)'
    )
    assert lines[5] == (
        "  escaping: refused (Its url '../elsewhere/SKILL.md' leads outside the index's folder.)"
    )
    assert lines[6] == "  wrangler: skipped (It has type 'archive', not skill-md.)"
    assert lines[7] == (
        f"Imported {index} for agent-user of {org.organization.pk} (client {org.client.name}): "
        "3 created, 0 updated, 0 unchanged, 3 refused, 1 skipped."
    )
    assert error == "3 entries were refused (see above)."

    skills = {skill.name: skill for skill in Skill.objects.filter(end_user=user)}
    assert sorted(skills) == ["call-the-api", "deploy-the-site", "read-csv-files"]
    assert _content(skills["read-csv-files"]) == (
        "read-csv-files",
        "Read CSV files whatever their encoding. Use it when a load fails.",
        CSV.instructions,
        list(CSV.pitfalls),
    )
    assert skills["deploy-the-site"].instructions == DEPLOY.instructions
    # Nothing learned (or imported) holds a detected secret in clear.
    assert TOKEN not in skills["call-the-api"].instructions
    assert "curl the endpoint" in skills["call-the-api"].instructions
    for skill in skills.values():
        [version] = SkillVersion.objects.filter(skill=skill)
        assert (version.author, version.operation, version.number) == ("import", "create", 1)
        assert (
            version.note == f"Imported from {tmp_path / skill.name / 'SKILL.md'} (its version 1)."
        )
        assert skill.status == Skill.Status.CANDIDATE and skill.client_id == org.client.pk


def test_a_dry_run_reports_and_writes_nothing_and_a_second_import_changes_nothing(
    org: TenantFixture, other_org: TenantFixture, tmp_path: Path
) -> None:
    end_user_create_or_get(tenant=org.tenant, user_id="agent-user", name=None)
    _skill(org, user_id="agent-user", content=DEPLOY)
    changed = SkillContent(**{**DEPLOY.snapshot(), "instructions": "# Deploying\n\nmake ship"})
    csv, deploy = _skill_md_file(tmp_path, CSV), _skill_md_file(tmp_path, changed)
    index = _index_file(
        tmp_path,
        [
            {
                "name": "read-csv-files",
                "type": "skill-md",
                "url": "read-csv-files/SKILL.md",
                "digest": "sha256:" + _sha256(csv),
            },
            {
                "name": "deploy-the-site",
                "type": "skill-md",
                "url": "./deploy-the-site/SKILL.md",
                "digest": "sha256:" + _sha256(deploy),
            },
        ],
    )
    organization = org.organization.pk
    before, theirs = rows_of(organization), rows_of(other_org.organization.pk)

    lines = _run("import_skills", organization, "agent-user", index, "--dry-run")
    assert lines == [
        "  read-csv-files: would be created",
        "  deploy-the-site: would be updated",
        f"Dry run: importing {index} for agent-user of {organization} (client "
        f"{org.client.name}): 1 created, 1 updated, 0 unchanged, 0 refused, 0 skipped. "
        "Nothing was changed.",
    ]
    assert rows_of(organization) == before and rows_of(other_org.organization.pk) == theirs

    assert _run("import_skills", organization, "agent-user", index)[:2] == [
        "  read-csv-files: created",
        "  deploy-the-site: updated",
    ]
    deployed = Skill.objects.get(client=org.client, name="deploy-the-site")
    assert deployed.instructions == "# Deploying\n\nmake ship" and deployed.version == 2
    newest = SkillVersion.objects.get(skill=deployed, number=2)
    assert (newest.author, newest.operation) == ("import", "edit")
    assert "+make ship" in newest.diff

    versions = SkillVersion.objects.count()
    assert _run("import_skills", organization, "agent-user", index)[:2] == [
        "  read-csv-files: unchanged",
        "  deploy-the-site: unchanged",
    ]
    assert SkillVersion.objects.count() == versions


def test_an_index_that_cannot_be_imported_is_refused_whole(
    org: TenantFixture, tmp_path: Path
) -> None:
    end_user_create_or_get(tenant=org.tenant, user_id="agent-user", name=None)
    organization = org.organization.pk
    other_schema = _index_file(tmp_path, [], **{"$schema": "https://example.com/v9.json"})
    with pytest.raises(CommandError, match=re.escape("names the schema 'https://example.com/v9")):
        _run("import_skills", organization, "agent-user", other_schema)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(CommandError, match="is not JSON"):
        _run("import_skills", organization, "agent-user", str(tmp_path / "broken.json"))
    with pytest.raises(CommandError, match="could not be read"):
        _run("import_skills", organization, "agent-user", str(tmp_path / "missing.json"))
    with pytest.raises(CommandError, match="No end user 'nobody'"):
        _run("import_skills", organization, "nobody", other_schema)
    assert not Skill.objects.exists()


# --- export → import ----------------------------------------------------------------------------


def test_exported_skills_import_as_the_same_skills(org: TenantFixture, tmp_path: Path) -> None:
    """What the API's index and export_skills give, imported for another user: the same name,
    description, instructions and pitfalls; imported back for their owner: unchanged."""
    originals = [_skill(org, user_id="alice-agent", content=c) for c in (CSV, DEPLOY)]
    end_user_create_or_get(tenant=org.tenant, user_id="new-agent", name=None)
    organization = org.organization.pk
    _run("export_skills", organization, "alice-agent", "--dir", str(tmp_path))
    # The folders' index is the API's, its urls relative.
    served = org.api.get("/.well-known/agent-skills/index.json", {"user_id": "alice-agent"})
    index = json.loads((tmp_path / "index.json").read_text())
    assert [{**e, "url": ""} for e in index["skills"]] == [
        {**e, "url": ""} for e in served.json()["skills"]
    ]

    lines = _run("import_skills", organization, "new-agent", str(tmp_path / "index.json"))
    assert lines[:2] == ["  deploy-the-site: created", "  read-csv-files: created"]
    for original in originals:
        copy = Skill.objects.get(end_user__user_id="new-agent", name=original.name)
        assert _content(copy) == (
            original.name,
            " ".join(original.description.split()),
            original.instructions,
            original.pitfalls,
        )
        assert copy.triggers[:1] == original.triggers[:1]

    lines = _run("import_skills", organization, "alice-agent", str(tmp_path / "index.json"))
    assert lines[:2] == ["  deploy-the-site: unchanged", "  read-csv-files: unchanged"]
    assert all(SkillVersion.objects.filter(skill=s).count() == 1 for s in originals)


# --- import_skills from an http URL ---------------------------------------------------------------


@pytest.fixture
def skill_host(loopback: LoopbackServer, tmp_path: Path) -> dict[str, bytes]:
    """Files the loopback server serves by path (its index at the well-known path)."""
    files: dict[str, bytes] = {}

    def serve(request) -> Reply:
        path = request.path.split("?")[0]
        if path not in files:
            return Reply(404, "not found", {"Content-Type": "text/plain"})
        kind = "application/json" if path.endswith(".json") else "text/markdown; charset=utf-8"
        return Reply(200, files[path], {"Content-Type": kind})

    loopback.respond(serve)
    return files


def test_import_from_an_http_url_resolves_its_urls_through_the_ssrf_guard(
    org: TenantFixture, loopback: LoopbackServer, skill_host: dict[str, bytes], settings
) -> None:
    end_user_create_or_get(tenant=org.tenant, user_id="agent-user", name=None)
    csv = skill_md(Skill(**CSV.snapshot(), version=4), confidence=0.5).encode()
    deploy = skill_md(Skill(**DEPLOY.snapshot(), version=1), confidence=0.5).encode()
    skill_host["/.well-known/agent-skills/read-csv-files/SKILL.md"] = csv
    skill_host["/published/deploy.md"] = deploy
    skill_host["/.well-known/agent-skills/index.json"] = json.dumps(
        {
            "$schema": DISCOVERY_SCHEMA,
            "skills": [
                # Relative to the index's URL, and path-absolute (against its origin).
                {
                    "name": "read-csv-files",
                    "type": "skill-md",
                    "url": "read-csv-files/SKILL.md",
                    "digest": "sha256:" + _sha256(csv),
                },
                {
                    "name": "deploy-the-site",
                    "type": "skill-md",
                    "url": "/published/deploy.md",
                    "sha256": _sha256(deploy),
                },
                {
                    "name": "gone",
                    "type": "skill-md",
                    "url": "gone/SKILL.md",
                    "sha256": "2" * 64,
                },
            ],
        }
    ).encode()
    port = loopback.url.rsplit(":", 1)[1]
    url = f"http://localhost:{port}/.well-known/agent-skills/index.json"
    organization = org.organization.pk

    # Off the allow-list, loopback is this server's own network: refused before any request.
    settings.IMAGE_FETCH_ALLOW_HOSTS = []
    with pytest.raises(CommandError, match="does not resolve to a public internet address"):
        _run("import_skills", organization, "agent-user", url)
    assert not loopback.requests

    settings.IMAGE_FETCH_ALLOW_HOSTS = ["localhost"]
    lines, error = _run_refusing("import_skills", organization, "agent-user", url)
    assert lines[:3] == [
        "  read-csv-files: created",
        "  deploy-the-site: created",
        "  gone: refused (The SKILL.md host localhost answered HTTP 404.)",
    ]
    assert error == "1 entries were refused (see above)."
    assert [request.path for request in loopback.requests] == [
        "/.well-known/agent-skills/index.json",
        "/.well-known/agent-skills/read-csv-files/SKILL.md",
        "/published/deploy.md",
        "/.well-known/agent-skills/gone/SKILL.md",
    ]
    assert loopback.requests[0].headers["accept"] == "application/json"
    csv_skill = Skill.objects.get(client=org.client, name="read-csv-files")
    assert _content(csv_skill)[2:] == (CSV.instructions, list(CSV.pitfalls))
    note = SkillVersion.objects.get(skill=csv_skill).note
    assert note == (
        f"Imported from http://localhost:{port}/.well-known/agent-skills/read-csv-files/SKILL.md"
        " (its version 4)."
    )
