"""Skill curation in the admin: an edit is version N+1 through the service, any two versions
side by side, restore, deprecate and restore to service; nothing written in place."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from skills.models import Skill, SkillVersion
from tests.factories import TenantFixture, skill_create


@pytest.fixture
def operator(client, db):
    user = get_user_model().objects.create_superuser("operator", "op@example.com", "pw")
    client.force_login(user)
    return client


def _form(skill: Skill, **changes: object) -> dict[str, object]:
    form = {
        "name": skill.name,
        "description": skill.description,
        "triggers": "\r\n".join(skill.triggers),
        "instructions": skill.instructions.replace("\n", "\r\n"),
        "pitfalls": "\r\n".join(skill.pitfalls),
        "status": skill.status,
        "note": "",
        # The versions inline's management form: shown, never changed.
        "versions-TOTAL_FORMS": str(skill.versions.count()),
        "versions-INITIAL_FORMS": str(skill.versions.count()),
        "versions-MIN_NUM_FORMS": "0",
        "versions-MAX_NUM_FORMS": "1000",
    }
    for index, version in enumerate(skill.versions.order_by("-number")):
        form[f"versions-{index}-id"] = str(version.pk)
        form[f"versions-{index}-skill"] = str(skill.pk)
    return form | changes


def test_an_operator_edit_is_a_new_version_and_a_no_op_writes_none(
    operator, org: TenantFixture
) -> None:
    skill = skill_create(org, user_id="sam")
    url = f"/admin/skills/skill/{skill.pk}/change/"
    page = operator.get(url)
    assert page.status_code == 200
    assert f"/admin/skills/skill/{skill.pk}/diff/" in page.content.decode()

    unchanged = operator.post(url, _form(skill), follow=True)
    assert "Nothing changed." in unchanged.content.decode()
    assert skill.versions.count() == 1

    edited = operator.post(
        url,
        _form(
            skill,
            instructions="# Reading CSV\r\n\r\n1. Sniff the encoding with chardet first.\r\n",
            pitfalls="Do not assume utf-8\r\n\r\n",
            note="A user reported latin-1 files",
        ),
        follow=True,
    )
    assert "Saved as version 2." in edited.content.decode()
    skill.refresh_from_db()
    assert skill.version == 2
    assert skill.instructions == "# Reading CSV\n\n1. Sniff the encoding with chardet first.\n"
    assert skill.pitfalls == ["Do not assume utf-8"]
    version = skill.versions.get(number=2)
    assert (version.author, version.operation, version.note) == (
        SkillVersion.Author.OPERATOR,
        "edit",
        "A user reported latin-1 files",
    )
    assert "+1. Sniff the encoding with chardet first." in version.diff


def test_a_form_that_breaks_the_rules_writes_nothing(operator, org: TenantFixture) -> None:
    skill = skill_create(org, user_id="sam")
    skill_create(org, user_id="sam", name="write-csv-files")
    url = f"/admin/skills/skill/{skill.pk}/change/"
    for changes, error in (
        ({"name": "Not A Name"}, "lowercase letters, digits and single hyphens"),
        ({"name": "write-csv-files"}, "This user already has a skill of that name."),
        ({"description": ""}, "This field is required."),
    ):
        response = operator.post(url, _form(skill, **changes))
        assert response.status_code == 200
        assert error in response.content.decode(), changes
    skill.refresh_from_db()
    assert (skill.version, skill.name) == (1, "read-csv-files")


def test_two_versions_side_by_side_and_a_restore(operator, org: TenantFixture) -> None:
    skill = skill_create(org, user_id="sam")
    url = f"/admin/skills/skill/{skill.pk}/change/"
    operator.post(url, _form(skill, description="Read CSV files of any encoding, quickly."))
    skill.refresh_from_db()
    operator.post(url, _form(skill, triggers="load a csv file\r\nopen a spreadsheet export"))
    skill.refresh_from_db()
    assert skill.version == 3

    page = operator.get(f"/admin/skills/skill/{skill.pk}/diff/?a=1&b=3").content.decode()
    assert "version 1" in page and "version 3" in page
    assert 'class="diff"' in page
    changed = re.findall(r'<span class="diff_(?:add|chg|sub)">([^<]*)</span>', page)
    assert any("quickly" in text for text in changed)
    assert any("spreadsheet" in text for text in changed)
    default = operator.get(f"/admin/skills/skill/{skill.pk}/diff/").content.decode()
    assert "version 2" in default and "version 3" in default  # the latest against the one before

    assert operator.get(f"/admin/skills/skill/{skill.pk}/rollback/1/").status_code == 405
    restored = operator.post(f"/admin/skills/skill/{skill.pk}/rollback/1/", follow=True)
    assert "Version 1 restored as version 4." in restored.content.decode()
    skill.refresh_from_db()
    assert skill.version == 4
    assert skill.description == "Read CSV files whatever their encoding."
    assert list(skill.triggers) == ["load a csv file"]
    assert skill.versions.get(number=4).author == SkillVersion.Author.ROLLBACK
    missing = operator.post(f"/admin/skills/skill/{skill.pk}/rollback/9/", follow=True)
    assert f"Skill {skill.pk} has no version 9." in missing.content.decode()
    assert operator.get("/admin/skills/skill/999999/diff/").status_code == 404


def test_deprecate_and_restore_from_the_list(operator, org: TenantFixture) -> None:
    skill = skill_create(org, user_id="sam")
    other = skill_create(org, user_id="sam", name="write-csv-files")
    selected = [skill.pk, other.pk]
    response = operator.post(
        "/admin/skills/skill/",
        {"action": "deprecate_selected", "_selected_action": selected},
        follow=True,
    )
    assert "2 skill(s) now deprecated." in response.content.decode()
    assert set(Skill.objects.values_list("status", flat=True)) == {"deprecated"}
    assert SkillVersion.objects.count() == 2  # a status is not the skill's text

    operator.post(
        "/admin/skills/skill/", {"action": "restore_selected", "_selected_action": [skill.pk]}
    )
    skill.refresh_from_db()
    other.refresh_from_db()
    assert (skill.status, other.status) == ("candidate", "deprecated")
    # Served again: the API finds it.
    found = org.api.post(
        "/skills/retrieve", {"user_id": "sam", "task": "load a csv file"}, format="json"
    ).json()
    assert [item["name"] for item in found["skills"]] == ["read-csv-files"]
