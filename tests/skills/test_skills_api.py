"""/skills: a learned skill is found for a new task of its kind, its versions, diffs and
source experiences are visible, an operator's change and a rollback are new versions, and the
export validates against the Agent Skills specification's reference validator."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from skills_ref.validator import validate

from skills.models import Experience, Skill, SkillVersion
from tests.factories import TenantFixture
from tests.skills.sessions import NEW_TASK


def _retrieve(org: TenantFixture, task: str, **extra: object) -> dict:
    response = org.api.post(
        "/skills/retrieve", {"user_id": "agent-user", "task": task, **extra}, format="json"
    )
    assert response.status_code == 200, response.content
    return response.json()


def test_a_new_task_of_the_kind_finds_the_skill(org: TenantFixture, learned: Skill) -> None:
    found = _retrieve(org, NEW_TASK)
    assert found["count"] >= 1
    top = found["skills"][0]
    assert top["id"] == str(learned.pk) and top["name"] == learned.name
    assert top["status"] == "candidate" and "not yet proven" in top["why"]
    assert 0.0 <= top["confidence"] <= 1.0 and top["ranks"]["bm25"] is not None
    # One vector, fit from what it says it does and the five tasks it was learned from; its
    # phrasings' embeddings kept for the next fit.
    assert learned.embeddings.count() == 1 and top["ranks"]["embedding"] == 1
    assert learned.phrasings.count() == 1 + len(set(learned.triggers))


def test_versions_diff_and_source_experiences_are_visible(
    org: TenantFixture, learned: Skill
) -> None:
    detail = org.api.get(f"/skills/{learned.pk}").json()
    assert [v["number"] for v in detail["versions"]] == [1]
    sources = set(detail["source_experience_ids"])
    assert sources == {str(pk) for pk in Experience.objects.values_list("pk", flat=True)}
    for experience_id in sources:
        assert org.api.get(f"/experiences/{experience_id}").json()["origin"] == "distilled"
    diff = org.api.get(f"/skills/{learned.pk}/versions/1/diff").json()
    assert diff["previous"] is None and f"+name: {learned.name}" in diff["diff"]
    assert org.api.get(f"/skills/{learned.pk}/versions/2/diff").status_code == 404


def test_a_patch_and_a_rollback_are_new_versions(org: TenantFixture, learned: Skill) -> None:
    patched = org.api.patch(
        f"/skills/{learned.pk}",
        {"instructions": "# Reading CSV\n\nAlways pass encoding='latin-1'.\n", "note": "shorter"},
        format="json",
    )
    assert patched.status_code == 200, patched.content
    assert patched.json()["version"] == 2
    assert SkillVersion.objects.get(skill=learned, number=2).author == "operator"
    rolled = org.api.post(f"/skills/{learned.pk}/rollback", {"version": 1}, format="json")
    assert rolled.status_code == 200, rolled.content
    assert rolled.json()["version"] == 3
    first, third = (SkillVersion.objects.get(skill=learned, number=n).snapshot for n in (1, 3))
    assert third == first
    assert SkillVersion.objects.get(skill=learned, number=3).author == "rollback"
    listed = org.api.get(f"/skills/{learned.pk}/versions").json()["results"]
    assert [v["number"] for v in listed] == [3, 2, 1]
    missing = org.api.post(f"/skills/{learned.pk}/rollback", {"version": 9}, format="json")
    assert missing.status_code == 409


def test_a_bad_patch_is_refused_and_changes_nothing(org: TenantFixture, learned: Skill) -> None:
    for body in ({"name": "Not A Name"}, {"name": "a--b"}, {}, {"description": ""}):
        response = org.api.patch(f"/skills/{learned.pk}", body, format="json")
        assert response.status_code == 422, (body, response.content)
    learned.refresh_from_db()
    assert learned.version == 1 and SkillVersion.objects.count() == 1


def test_versions_are_immutable_in_the_database(learned: Skill) -> None:
    from django.db import DatabaseError, transaction

    version = SkillVersion.objects.get(skill=learned)
    with pytest.raises(DatabaseError), transaction.atomic():
        SkillVersion.objects.filter(pk=version.pk).update(note="rewritten")


def test_export_validates_against_the_agent_skills_rules(
    org: TenantFixture, learned: Skill, tmp_path: Path
) -> None:
    response = org.api.get("/skills/export", {"user_id": "agent-user"})
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
        names = archive.namelist()
        archive.extractall(tmp_path)
    assert names == [f"{learned.name}/SKILL.md"]
    for folder in tmp_path.iterdir():
        assert validate(folder) == [], folder
        text = (folder / "SKILL.md").read_text()
        assert len(text.splitlines()) < 500
    index = org.api.get("/skills/index.json", {"user_id": "agent-user"}).json()
    [entry] = index["skills"]
    assert entry["name"] == learned.name and entry["digest"].startswith("sha256:")
    served = org.api.get(entry["url"])
    assert served.status_code == 200
    import hashlib

    assert "sha256:" + hashlib.sha256(served.content).hexdigest() == entry["digest"]
