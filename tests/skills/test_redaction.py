"""``manage.py redact_stored`` (and the migration that runs it): what was stored before the
detector knew a form is redacted in place — memories, experiences, recommendations, and every
version of a skill, after which a version authored ``redaction`` says so."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction

from memory.models import EpisodicMemory
from mirix_site.common.history import tracked_models
from skills.models import Experience, Recommendation, Skill, SkillVersion
from tests.factories import TenantFixture, experiences_create, memories_create, skill_create

PASSWORD = "Hunter2-Secret!"
TOKEN = "ghp_" + "R4nd0mT0k3nV4lu3" * 2 + "Xy12"


def _stored_in_clear(org: TenantFixture) -> tuple[Skill, Experience]:
    """Rows as an older server stored them: the secrets written past today's redaction."""
    memories_create(org, user_id="sam")
    EpisodicMemory.objects.filter(client=org.client).update(
        details=f"user: the password is {PASSWORD}"
    )
    experience = experiences_create(org, user_id="sam", recommended=True)
    Experience.objects.filter(pk=experience.pk).update(
        action=f"login with token {TOKEN}", context={"db_password": PASSWORD}
    )
    Recommendation.objects.filter(client=org.client).update(task=f"use {TOKEN}")
    skill = skill_create(org, user_id="sam")
    Skill.objects.filter(pk=skill.pk).update(instructions=f"# Steps\n\nexport TOKEN={TOKEN}\n")
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('skills.redacting', 'on', true)")
        version = SkillVersion.objects.get(skill=skill)
        snapshot = {**version.snapshot, "instructions": f"# Steps\n\nexport TOKEN={TOKEN}\n"}
        SkillVersion.objects.filter(pk=version.pk).update(
            snapshot=snapshot, diff=f"+export TOKEN={TOKEN}\n"
        )
        cursor.execute("SELECT set_config('skills.redacting', 'off', true)")
    return skill, experience


def _anything_in_clear() -> list[str]:
    rows = [
        *EpisodicMemory.objects.values_list("details", flat=True),
        *Experience.objects.values_list("action", flat=True),
        *(str(context) for context in Experience.objects.values_list("context", flat=True)),
        *Recommendation.objects.values_list("task", flat=True),
        *Skill.objects.values_list("instructions", flat=True),
        *(str(snapshot) for snapshot in SkillVersion.objects.values_list("snapshot", flat=True)),
        *SkillVersion.objects.values_list("diff", flat=True),
        # Every change's "before", of every tracked model.
        *(
            str(values)
            for model in tracked_models()
            for values in model.history.rel.related_model.objects.values()
        ),
    ]
    return [row for row in rows if PASSWORD in row or TOKEN in row]


def test_stored_secrets_are_redacted_in_place_and_the_skill_says_so(org: TenantFixture) -> None:
    skill, experience = _stored_in_clear(org)
    assert _anything_in_clear()

    dry = StringIO()
    call_command("redact_stored", "--dry-run", stdout=dry)
    assert "skills: 1 hold" in dry.getvalue() and _anything_in_clear()

    out = StringIO()
    call_command("redact_stored", stdout=out)
    assert "experiences: 1 redacted" in out.getvalue()
    assert _anything_in_clear() == []
    # Outside a redaction the versions are as immutable as ever.
    with pytest.raises(IntegrityError, match="immutable"), transaction.atomic():
        SkillVersion.objects.filter(skill=skill).update(note="rewritten")
    versions = list(SkillVersion.objects.filter(skill=skill).order_by("number"))
    assert [(v.number, v.author) for v in versions] == [(1, "import"), (2, "redaction")]
    assert "<github-token>" in versions[0].snapshot["instructions"]
    assert versions[1].diff == ""  # the version saying so quotes nothing it removed
    assert (
        "export TOKEN=<github-token>"
        in org.api.get(f"/skills/{skill.pk}/SKILL.md").content.decode()
    )
    experience.refresh_from_db()
    assert experience.context == {"db_password": "<password>"}
    assert "github-token" in experience.action_key and TOKEN not in experience.action_key

    again = StringIO()
    call_command("redact_stored", stdout=again)
    assert "skills: 0 redacted" in again.getvalue()
    assert SkillVersion.objects.filter(skill=skill).count() == 2
