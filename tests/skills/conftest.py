"""Fixtures of the skill-learning tests."""

from __future__ import annotations

import pytest
from django.test import override_settings

from skills.models import LearningRun, Skill
from skills.tasks import learning_run_task
from tests.factories import TenantFixture
from tests.skills.sessions import CSV_TASKS, csv_session, session_send


@pytest.fixture
def learned(org: TenantFixture, django_capture_on_commit_callbacks) -> Skill:
    """The skill a deterministic run learns from five CSV sessions with the same fix."""
    with override_settings(LLM_PROVIDER="none"):
        with django_capture_on_commit_callbacks(execute=True):
            for index, task in enumerate(CSV_TASKS[:5]):
                session_send(org.api, f"csv-{index}", csv_session(task))
        run = LearningRun.objects.get()
        assert learning_run_task.apply(args=[run.pk]).get() == "succeeded"
    return Skill.objects.get()
