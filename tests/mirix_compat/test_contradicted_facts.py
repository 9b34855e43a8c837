"""A fact a later turn contradicted, as the published MIRIX client reads it: after auto-dream,
``retrieve_with_conversation`` about where the user lives answers the current fact, not the one
it replaced, and the core block lists the current one."""

from __future__ import annotations

import pytest

from memory.models import ExtractionJob
from memory.services import extraction_job_run
from tests.factories import chat_turns
from tests.mirix_compat.conftest import USER_ID, Mirix

pytestmark = pytest.mark.django_db(transaction=True)


def test_retrieve_with_conversation_answers_the_current_fact(mirix: Mirix) -> None:
    api = mirix.tenant.api
    for text, when in (
        ("I live in Paris", "2025-03-01T09:00:00Z"),
        ("we moved to Berlin", "2025-03-05T09:00:00Z"),
    ):
        added = api.post(
            "/memory/add",
            {"user_id": USER_ID, "messages": chat_turns(text, "Noted."), "occurred_at": when},
            format="json",
        )
        assert added.status_code == 202, added.content
    for job in ExtractionJob.objects.filter(status="queued"):
        extraction_job_run(organization_id=job.organization_id, job_id=job.pk)
    dreamt = api.post(f"/memory/auto_dream?user_id={USER_ID}", {"mode": "semantic"}, format="json")
    assert dreamt.json()["types"]["semantic"]["superseded"] == 1

    answer = mirix.client.retrieve_with_conversation(
        user_id=USER_ID, messages=chat_turns("where do I live?")[:1]
    )

    facts = [item["summary"] for item in answer["memories"]["semantic"]["items"]]
    assert facts[0] == "User moved to Berlin and lives there."
    assert "User lives in Paris." not in facts
    [human] = [b for b in answer["memories"]["core"]["items"] if b["label"] == "human"]
    assert "User moved to Berlin and lives there." in human["value"].splitlines()
    assert "User lives in Paris." not in human["value"]
