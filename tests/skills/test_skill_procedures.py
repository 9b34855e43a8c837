"""Active skills are served as MIRIX procedural memories: POST /memory/retrieve/conversation
lists them under ``procedural`` (candidates are not), and DELETE /memory/procedural/skill-<id>
deletes one softly, as a version, within its user only."""

from __future__ import annotations

from skills.models import Skill, SkillVersion
from tests.factories import TenantFixture
from tests.skills.sessions import NEW_TASK


def _procedural(org: TenantFixture) -> list[dict]:
    response = org.api.post(
        "/memory/retrieve/conversation",
        {"user_id": "agent-user", "messages": [{"role": "user", "content": NEW_TASK}]},
        format="json",
    )
    assert response.status_code == 200, response.content
    return response.json()["memories"]["procedural"]["items"]


def test_active_skills_are_served_as_procedures(org: TenantFixture, learned: Skill) -> None:
    assert _procedural(org) == []  # a candidate is not served with conversation memory
    Skill.objects.filter(pk=learned.pk).update(status="active")
    [item] = _procedural(org)
    assert item["id"] == f"skill-{learned.pk}" and item["entry_type"] == "skill"
    assert item["summary"] == learned.description and item["steps"]
    topic = org.api.get(
        "/memory/retrieve/topic", {"user_id": "agent-user", "topic": "read a CSV file"}
    ).json()
    assert [p["id"] for p in topic["memories"]["procedural"]["items"]] == [f"skill-{learned.pk}"]


def test_a_skill_deleted_as_a_procedure_is_a_version_and_no_longer_served(
    org: TenantFixture, other_org: TenantFixture, learned: Skill
) -> None:
    Skill.objects.filter(pk=learned.pk).update(status="active")
    path = f"/memory/procedural/skill-{learned.pk}"
    other_org.api.post("/users/create_or_get", {"user_id": "agent-user"}, format="json")
    assert other_org.api.delete(path + "?user_id=agent-user").status_code == 404
    org.api.post("/users/create_or_get", {"user_id": "someone-else"}, format="json")
    assert org.api.delete(path + "?user_id=someone-else").status_code == 404
    deleted = org.api.delete(path + "?user_id=agent-user")
    assert deleted.status_code == 200, deleted.content
    learned.refresh_from_db()
    assert learned.status == "deleted" and learned.version == 2
    latest = SkillVersion.objects.get(skill=learned, number=2)
    assert (
        latest.operation == "delete"
        and latest.snapshot == SkillVersion.objects.get(skill=learned, number=1).snapshot
    )
    assert _procedural(org) == []
    assert org.api.delete(path + "?user_id=agent-user").status_code == 404
    assert org.api.get("/skills", {"user_id": "agent-user"}).json()["results"] == []
    assert org.api.get(f"/skills/{learned.pk}").json()["status"] == "deleted"
