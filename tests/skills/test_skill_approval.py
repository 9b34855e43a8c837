"""Approval mode (SKILL_REQUIRE_APPROVAL): what learning runs write waits for an operator. A
new skill is a draft, not served, until approved; a curator's edit of a skill is a proposal the
admin shows against the current version, approved (the next version) or rejected."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings

from skills.models import LearningRun, Skill, SkillProposal, SkillVersion
from skills.services.skills import skill_draft_approve
from skills.tasks import learning_run_task
from tests.factories import TenantFixture
from tests.skills.sessions import CSV_TASKS, csv_session, session_send


@pytest.fixture
def operator(client, db):
    user = get_user_model().objects.create_superuser("operator", "op@example.com", "pw")
    client.force_login(user)
    return client


def _run(org: TenantFixture, tasks: list[str], capture, first: int = 0) -> LearningRun:
    with capture(execute=True):
        for index, task in enumerate(tasks, start=first):
            session_send(org.api, f"csv-{index}", csv_session(task))
    run = LearningRun.objects.get(state="queued")
    assert learning_run_task.apply(args=[run.pk]).get() == "succeeded"
    return run


def _served(org: TenantFixture) -> list[str]:
    found = org.api.post(
        "/skills/retrieve", {"user_id": "agent-user", "task": CSV_TASKS[0]}, format="json"
    )
    assert found.status_code == 200, found.content
    return [item["name"] for item in found.json()["skills"]]


@override_settings(LLM_PROVIDER="none", SKILL_REQUIRE_APPROVAL=True)
def test_a_learned_skill_waits_as_a_draft_until_an_operator_approves_it(
    operator, org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    _run(org, CSV_TASKS[:5], django_capture_on_commit_callbacks)
    [skill] = Skill.objects.all()
    assert (skill.status, skill.version) == ("draft", 1)
    assert _served(org) == []
    listed = org.api.get("/skills", {"user_id": "agent-user"}).json()
    assert [(item["name"], item["status"]) for item in listed["results"]] == [(skill.name, "draft")]
    # A client cannot serve it by setting its status.
    refused = org.api.patch(f"/skills/{skill.pk}", {"status": "candidate"}, format="json")
    assert refused.status_code == 409
    assert "approval" in refused.json()["detail"]

    page = operator.get(f"/admin/skills/skill/{skill.pk}/diff/?a=1&b=1")
    assert page.status_code == 200
    done = operator.post(
        "/admin/skills/skill/",
        {"action": "approve_drafts", "_selected_action": [skill.pk]},
        follow=True,
    )
    assert "1 draft(s) approved." in done.content.decode()
    skill.refresh_from_db()
    assert (skill.status, skill.version) == ("candidate", 1)
    assert _served(org) == [skill.name]


@override_settings(
    LLM_PROVIDER="none", SKILL_REQUIRE_APPROVAL=True, SKILL_TRIGGER_SESSION_THRESHOLD=2
)
def test_a_curator_edit_waits_as_a_proposal_shown_against_the_current_version(
    operator, org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    _run(org, CSV_TASKS[:2], django_capture_on_commit_callbacks)
    [skill] = Skill.objects.all()
    skill_draft_approve(skill=skill)
    before = Skill.objects.get()
    second = _run(org, CSV_TASKS[2:4], django_capture_on_commit_callbacks, first=10)

    [proposal] = SkillProposal.objects.all()
    assert (proposal.state, proposal.base_version, proposal.run) == ("pending", 1, second)
    assert set(CSV_TASKS[2:4]) <= set(proposal.snapshot["triggers"])
    unchanged = Skill.objects.get()
    assert (unchanged.version, unchanged.triggers) == (1, before.triggers)
    assert unchanged.learned_successes == before.learned_successes
    change_page = operator.get(f"/admin/skills/skill/{skill.pk}/change/").content.decode()
    assert "1 proposal waiting" in change_page

    page = operator.get(f"/admin/skills/skillproposal/{proposal.pk}/change/").content.decode()
    assert f"version {skill.version + 1}" in page
    assert "orders.csv" in CSV_TASKS[2] and "orders.csv" in page  # the trigger it adds
    assert 'class="diff_add"' in page
    assert operator.get(f"/admin/skills/skillproposal/{proposal.pk}/approve/").status_code == 405

    approved = operator.post(f"/admin/skills/skillproposal/{proposal.pk}/approve/", follow=True)
    assert f"Approved: version 2 of {skill.name}." in approved.content.decode()
    skill.refresh_from_db()
    assert skill.version == 2 and set(CSV_TASKS[:4]) <= set(skill.triggers)
    assert skill.learned_successes > before.learned_successes
    version = SkillVersion.objects.get(skill=skill, number=2)
    assert (version.author, version.run) == ("curator", second)
    assert version.diff.startswith("--- v1\n+++ v2\n")
    proposal.refresh_from_db()
    assert (proposal.state, proposal.version) == ("approved", version)

    again = operator.post(f"/admin/skills/skillproposal/{proposal.pk}/approve/", follow=True)
    assert "This proposal was approved already." in again.content.decode()
    assert SkillVersion.objects.filter(skill=skill).count() == 2


@override_settings(LLM_PROVIDER="none")
def test_a_rejected_proposal_writes_nothing(operator, org: TenantFixture, learned: Skill) -> None:
    from dataclasses import replace

    from skills.content import SkillContent
    from skills.services.skills import Provenance, skill_proposal_write

    proposal = skill_proposal_write(
        skill=learned,
        content=replace(SkillContent.of(learned), description="A rewrite nobody wanted."),
        provenance=Provenance(author="curator", operation="edit", operation_key="k-reject"),
    )
    rejected = operator.post(f"/admin/skills/skillproposal/{proposal.pk}/reject/", follow=True)
    assert "Rejected: the skill is unchanged." in rejected.content.decode()
    proposal.refresh_from_db()
    assert proposal.state == "rejected" and proposal.decided_at is not None
    learned.refresh_from_db()
    assert learned.version == 1 and learned.description != "A rewrite nobody wanted."
    page = operator.get(f"/admin/skills/skillproposal/{proposal.pk}/change/").content.decode()
    assert "Approve:" not in page  # decided: no buttons
