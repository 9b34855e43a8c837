"""The operators' skill commands: ``learn_skills`` queues (or runs here) a user's learning run as
POST /learning-runs does, or every run the trigger missed; ``export_skills`` writes what GET
/skills/export answers; ``backfill_skill_versions`` writes the versions and counters of skills
written around the versions service. A dry run changes no row of any table."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection
from django.test import override_settings

from accounts.services import end_user_create_or_get
from skills.content import SkillContent, content_diff
from skills.models import Experience, LearningRun, Skill, SkillVersion
from skills.services.skills import skill_patch
from tests.accounts.test_tenancy import rows_of
from tests.factories import TenantFixture, skill_create
from tests.skills.sessions import CSV_TASKS, csv_session, session_send


def _run(*args: str) -> list[str]:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().splitlines()


def _csv_sessions(org: TenantFixture, *indexes: int) -> None:
    """Closed task sessions of agent-user (a test's transaction never commits, so their closes
    queue no run: each stays for a run to learn from)."""
    for index in indexes:
        session_send(org.api, f"csv-{index}", csv_session(CSV_TASKS[index]))


# --- learn_skills ----------------------------------------------------------------------------


@override_settings(LLM_PROVIDER="none")
def test_learn_skills_runs_here_pools_at_its_cap_and_a_dry_run_shows_what_waits(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    _csv_sessions(org, 0, 1, 2, 3, 4)
    organization = org.organization.pk
    with override_settings(CURATOR_MAX_STEPS=0):
        lines = _run("learn_skills", organization, "agent-user", "--wait")
    run = LearningRun.objects.get()
    assert (run.state, run.trigger) == ("budget_exhausted", "request")
    pooled = list(Experience.objects.filter(status="pooled").order_by("pk"))
    assert pooled and run.experiences_pooled == len(pooled)
    assert not Skill.objects.exists()
    assert lines[0] == f"  running learning run #{run.pk} here: 5 task sessions, 0 waiting lessons"
    assert lines[-1].startswith(
        f"Learning run #{run.pk} of agent-user of {organization} (client {org.client.name}) "
        "budget_exhausted: 0 skills created, 0 edited, 0 merged, 0 deprecated."
    )

    _csv_sessions(org, 5)
    before, theirs = rows_of(organization), rows_of(other_org.organization.pk)
    lines = _run("learn_skills", organization, "agent-user", "--dry-run")
    assert rows_of(organization) == before and rows_of(other_org.organization.pk) == theirs
    assert lines[0].startswith("  task session csv-5  closed ")
    assert lines[1:-1] == [
        f"  lesson #{lesson.pk} pooled: {lesson.title} ({lesson.pool_reason})" for lesson in pooled
    ]
    assert lines[-1] == (
        f"Dry run: a learning run of agent-user of {organization} (client {org.client.name}) "
        f"would learn from 1 task sessions and {len(pooled)} waiting lessons. Nothing was changed."
    )

    lines = _run("learn_skills", organization, "agent-user", "--wait")
    second = LearningRun.objects.exclude(pk=run.pk).get()
    assert second.state == "succeeded"
    assert not Experience.objects.filter(status__in=["pooled", "pending"]).exists()
    [skill] = Skill.objects.all()
    assert second.skills_created == 1 and skill.end_user.user_id == "agent-user"
    assert lines[-1] == (
        f"Learning run #{second.pk} of agent-user of {organization} (client {org.client.name}) "
        "succeeded: 1 skills created, 0 edited, 0 merged, 0 deprecated."
    )
    assert org.api.get(f"/learning-runs/{second.pk}").json()["session_ids"] == ["csv-5"]


def test_learn_skills_queues_a_run_as_the_api_does(org: TenantFixture) -> None:
    _csv_sessions(org, 0, 1)
    organization = org.organization.pk
    lines = _run("learn_skills", organization, "agent-user")
    run = LearningRun.objects.get()
    assert (run.state, run.trigger) == ("queued", "request")
    assert lines == [
        f"Queued learning run #{run.pk} of agent-user of {organization} (client "
        f"{org.client.name}): 2 task sessions, 0 waiting lessons; a worker runs it."
    ]
    _csv_sessions(org, 2)
    lines = _run("learn_skills", organization, "agent-user", "--client", org.client.pk)
    assert lines == [
        f"Learning run #{run.pk} of agent-user of {organization} (client {org.client.name}) was "
        "queued already: 1 task sessions joined it, 3 in all."
    ]
    detail = org.api.get(f"/learning-runs/{run.pk}").json()
    assert detail["session_ids"] == ["csv-0", "csv-1", "csv-2"]
    # The API answers the same run: the command queued it as POST /learning-runs does.
    again = org.api.post("/learning-runs", {"user_id": "agent-user"}, format="json")
    assert again.status_code == 200 and again.json()["id"] == str(run.pk)


def test_learn_skills_refuses_what_it_cannot_name_or_learn(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    organization = org.organization.pk
    end_user_create_or_get(tenant=other_org.tenant, user_id="bobs-user", name=None)
    end_user_create_or_get(tenant=org.tenant, user_id="agent-user", name=None)
    refusals = {
        ("no-such-org", "agent-user"): "No organization with id 'no-such-org'.",
        # Another tenant's user answers as a missing one.
        (organization, "bobs-user"): f"No end user 'bobs-user' in organization '{organization}'.",
        (organization, "agent-user"): (
            f"No closed task session of agent-user of {organization} (client "
            f"{org.client.name}) is left to learn from."
        ),
    }
    for (organization_id, user_id), message in refusals.items():
        for flags in ([], ["--dry-run"], ["--wait"]):
            with pytest.raises(CommandError) as raised:
                call_command("learn_skills", organization_id, user_id, *flags)
            assert str(raised.value) == message
    with pytest.raises(CommandError, match="No client 'nope' in organization"):
        call_command("learn_skills", organization, "agent-user", "--client", "nope")
    org.another_client("second")
    with pytest.raises(CommandError, match=r"has clients .*: name one with --client"):
        call_command("learn_skills", organization, "agent-user")
    with pytest.raises(CommandError, match="Name the organization and the end user"):
        call_command("learn_skills", organization)
    with pytest.raises(CommandError, match="--all-due takes no ORG"):
        call_command("learn_skills", organization, "agent-user", "--all-due")
    assert not LearningRun.objects.exists()


def test_learn_skills_all_due_queues_the_runs_the_trigger_missed(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    _csv_sessions(org, 0, 1, 2, 3, 4)  # due: five, and their closes queued no run
    for index in range(2):  # not due: two
        session_send(other_org.api, f"few-{index}", csv_session(CSV_TASKS[index]))
    before = {key: rows_of(key) for key in (org.organization.pk, other_org.organization.pk)}
    lines = _run("learn_skills", "--all-due", "--dry-run")
    assert {key: rows_of(key) for key in before} == before
    assert lines == [
        f"  agent-user of {org.organization.pk} (client {org.client.name}): 5 task sessions "
        "to learn from",
        "Dry run: 1 users are due a learning run (threshold 5 closed task sessions). "
        "Nothing was changed.",
    ]

    lines = _run("learn_skills", "--all-due")
    run = LearningRun.objects.get()
    assert (run.state, run.trigger, run.client_id) == ("queued", "threshold", org.client.pk)
    assert run.session_links.count() == 5
    assert lines[0].endswith(f": run #{run.pk} (1 of 1)")
    # A session closed after the run was queued, its trigger missed: the waiting run takes it.
    _csv_sessions(org, 5)
    lines = _run("learn_skills", "--all-due")
    assert lines[0].endswith(
        f"1 task sessions to learn from, a run waiting: run #{run.pk} (1 of 1)"
    )
    assert LearningRun.objects.get().session_links.count() == 6
    assert _run("learn_skills", "--all-due")[-1].startswith("Queued the learning runs of 0 users")


# --- export_skills ---------------------------------------------------------------------------


def test_export_skills_writes_what_the_api_exports(
    org: TenantFixture, other_org: TenantFixture, learned: Skill, tmp_path: Path
) -> None:
    skill_create(org, user_id="agent-user", name="old-habit")
    Skill.objects.filter(name="old-habit").update(status="deprecated")  # not served: not exported
    exported = org.api.get("/skills/export", {"user_id": "agent-user"}).content
    organization = org.organization.pk

    lines = _run("export_skills", organization, "agent-user", "-o", str(tmp_path / "skills.zip"))
    assert (tmp_path / "skills.zip").read_bytes() == exported
    assert lines == [
        f"  {learned.name}/SKILL.md  v{learned.version} {learned.status}",
        f"Exported 1 skills of agent-user of {organization} (client {org.client.name}) to "
        f"{tmp_path / 'skills.zip'}.",
    ]

    _run("export_skills", organization, "agent-user", "--dir", str(tmp_path / "folders"))
    with zipfile.ZipFile(io.BytesIO(exported)) as archive:
        expected = {name: archive.read(name) for name in archive.namelist()}
    written = {
        str(path.relative_to(tmp_path / "folders")): path.read_bytes()
        for path in (tmp_path / "folders").rglob("*")
        if path.is_file()
    }
    index = json.loads(written.pop("index.json"))
    assert written == expected and list(written) == [f"{learned.name}/SKILL.md"]
    # Beside them, their discovery index, its urls relative: the folder is a well-known tree.
    [entry] = index["skills"]
    assert entry["url"] == f"{learned.name}/SKILL.md"
    assert entry["digest"] == "sha256:" + hashlib.sha256(expected[entry["url"]]).hexdigest()

    # Another client, reading nothing of this one's: no skills of the user.
    second = org.another_client("second")
    lines = _run(
        "export_skills", organization, "agent-user", "--client", "second", "--dir", str(tmp_path)
    )
    assert lines == [
        f"Exported 0 skills of agent-user of {organization} (client {second.client.name}) to "
        f"{tmp_path}."
    ]
    with pytest.raises(CommandError, match="No end user 'agent-user' in organization"):
        call_command(
            "export_skills", other_org.organization.pk, "agent-user", "-o", str(tmp_path / "x")
        )
    assert not (tmp_path / "x").exists()
    with pytest.raises(CommandError, match="one of the arguments -o/--output --dir is required"):
        call_command("export_skills", organization, "agent-user", "--client", "second")


# --- backfill_skill_versions -----------------------------------------------------------------


def _sql(statement: str, *params: object) -> None:
    """A change made around the versions service, as a raw SQL update or old code made it."""
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def _versions(skill: Skill) -> list[SkillVersion]:
    return list(SkillVersion.objects.filter(skill=skill).order_by("number"))


def test_backfill_writes_the_versions_and_counters_skills_lack(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    end_user, _ = end_user_create_or_get(tenant=org.tenant, user_id="agent-user", name=None)
    # A skill inserted with no version (as a row written by hand has none).
    bare = Skill.objects.create(
        **org.tenant.owner_ids(end_user),
        name="bare-skill",
        description="Inserted without a version.",
        instructions="1. Do it.\n",
    )
    # A skill whose text a raw update changed: its newest version holds the old text.
    edited = skill_create(org, user_id="agent-user", name="edited-skill")
    _sql(
        "UPDATE skills_skill SET instructions = %s WHERE id = %s",
        "# Reading CSV\n\n1. Try utf-8, then cp1252.\n",
        edited.pk,
    )
    # Counters behind and ahead of their newest version.
    behind = skill_create(org, user_id="agent-user", name="behind-skill")
    ahead = skill_create(org, user_id="agent-user", name="ahead-skill")
    _sql("UPDATE skills_skill SET version = 0 WHERE id = %s", behind.pk)
    _sql("UPDATE skills_skill SET version = 7 WHERE id = %s", ahead.pk)
    # A version old code wrote with no author and no diff, and the text it wrote to the row
    # (but not the counter).
    flawed = skill_create(other_org, user_id="bobs-user", name="flawed-skill")
    changed = SkillContent.of(flawed).snapshot() | {"description": "Read CSV files, any size."}
    SkillVersion.objects.create(
        **flawed.owner_ids, skill=flawed, number=2, snapshot=changed, diff="", author=""
    )
    _sql(
        "UPDATE skills_skill SET description = %s WHERE id = %s",
        changed["description"],
        flawed.pk,
    )
    fine = skill_create(org, user_id="agent-user", name="fine-skill")
    untouched = _versions(fine)
    organizations = (org.organization.pk, other_org.organization.pk)
    before = {key: rows_of(key) for key in organizations}
    counters = dict(Skill.objects.values_list("pk", "version"))

    # Before: the lagging counter makes an edit collide with the version it would number.
    with pytest.raises(IntegrityError, match="skill_version_unique"):
        skill_patch(tenant=org.tenant, skill=behind, changes={"description": "Read any CSV."})

    lines = _run("backfill_skill_versions", "--dry-run")
    assert {key: rows_of(key) for key in organizations} == before
    assert dict(Skill.objects.values_list("pk", "version")) == counters
    flawed_lines = [
        f"  left: skill {flawed.pk} (flawed-skill) version 2: author '' is none known (immutable)",
        f"  left: skill {flawed.pk} (flawed-skill) version 2: its diff is not that of its text "
        "(immutable)",
    ]
    assert lines == [
        "  6 skills read",
        *flawed_lines,
        "Dry run: would write 2 versions and 3 version counters of 6 skills; 2 left as they "
        "are. Nothing was changed.",
    ]

    lines = _run("backfill_skill_versions")
    assert lines[-1] == "Wrote 2 versions and 3 version counters of 6 skills; 2 left as they are."
    after = {key: rows_of(key) for key in organizations}
    assert after[org.organization.pk]["skills.SkillVersion"] == (
        before[org.organization.pk]["skills.SkillVersion"] + 2
    )

    [first] = _versions(bare)
    assert (first.number, first.author, first.operation) == (1, "import", "backfill")
    assert first.snapshot == SkillContent.of(bare).snapshot()
    assert first.diff == content_diff(None, SkillContent.of(bare), numbers=(0, 1))
    bare.refresh_from_db()
    assert bare.version == 1

    _first, new = _versions(edited)
    assert (new.number, new.author, new.operation) == (2, "import", "backfill")
    assert "-1. Try utf-8, then latin-1.\n+1. Try utf-8, then cp1252.\n" in new.diff
    listed = org.api.get(f"/skills/{edited.pk}/versions").json()["results"]
    assert [(item["number"], item["author"]) for item in listed] == [(2, "import"), (1, "import")]

    for skill, number in ((behind, 1), (ahead, 1), (flawed, 2)):
        skill.refresh_from_db()
        assert skill.version == number == _versions(skill)[-1].number
    # The counter mended, an edit writes the next version.
    patched = org.api.patch(f"/skills/{behind.pk}", {"description": "Read any CSV."}, format="json")
    assert patched.status_code == 200, patched.content
    assert [version.number for version in _versions(behind)] == [1, 2]
    assert _versions(fine) == untouched
    [kept] = [version for version in _versions(flawed) if version.number == 2]
    assert (kept.author, kept.diff) == ("", "")  # immutable: reported, not rewritten

    again = {key: rows_of(key) for key in organizations}
    lines = _run("backfill_skill_versions")
    assert lines[-1] == "Wrote 0 versions and 0 version counters of 6 skills; 2 left as they are."
    assert {key: rows_of(key) for key in organizations} == again


def test_backfill_leaves_text_that_breaks_the_rules(org: TenantFixture) -> None:
    skill = skill_create(org, user_id="agent-user", name="named-skill")
    _sql("UPDATE skills_skill SET name = %s WHERE id = %s", "Not A Name", skill.pk)
    lines = _run("backfill_skill_versions")
    assert lines[1:] == [
        f"  left: skill {skill.pk} (Not A Name): its text breaks the rules (name); no version "
        "written",
        "Wrote 0 versions and 0 version counters of 1 skills; 1 left as they are.",
    ]
    assert len(_versions(skill)) == 1
