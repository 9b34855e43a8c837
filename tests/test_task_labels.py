"""Flower shows whom each task serves: the messages queued in the real Redis broker carry their
organization and end user as keyword arguments (what Flower's task list shows and its search
finds), the extraction token says whom it was queued for and its result whom it served, and
every task still runs a message queued without labels (by the release before an upgrade)."""

from __future__ import annotations

import ast
import base64
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from images.models import ImageFetch
from images.tasks import image_fetch_task, recover_image_fetches
from memory.models import ExtractionJob
from memory.services.extraction import EXTRACT_TASK
from memory.tasks import extract_memories, recover_extraction_jobs
from mirix_site.common.redis import redis_client
from skills.models import LearningRun
from skills.services.learning import LEARNING_RUN_TASK
from skills.services.skills import SKILLS_EMBED_TASK
from skills.tasks import learning_run_task, recover_learning_runs, skills_embed_task
from tests.factories import TenantFixture, chat_turns, learning_run_create, skill_create

QUEUES = ("ingest", "images", "learning")
IMAGE_FETCH_TASK = "images.tasks.image_fetch_task"


@pytest.fixture(autouse=True)
def _empty_queues() -> Iterator[None]:
    """Queues holding only what this test sent (no worker runs here: nothing takes them)."""
    redis_client().delete(*QUEUES)
    yield
    redis_client().delete(*QUEUES)


def queued(queue: str, task: str) -> list[dict[str, Any]]:
    """The messages of ``task`` waiting in ``queue``, oldest first, as a worker (and Flower,
    through the worker's task-received event) reads them."""
    messages = []
    for raw in reversed(redis_client().lrange(queue, 0, -1)):  # kombu pushes on the left
        envelope = json.loads(raw)
        headers = envelope["headers"]
        if headers["task"] != task:
            continue
        args, kwargs, _embed = json.loads(base64.b64decode(envelope["body"]))
        messages.append(
            {"args": args, "kwargs": kwargs, "shown": ast.literal_eval(headers["kwargsrepr"])}
        )
    return messages


def add(tenant: TenantFixture, user_id: str, capture: Any) -> None:
    with capture(execute=True):
        response = tenant.api.post(
            "/memory/add",
            {"user_id": user_id, "messages": chat_turns("I moved to Lisbon", "Nice city")},
            format="json",
        )
    assert response.status_code == 202, response.content


def test_extraction_is_labelled_with_whom_it_was_queued_for_and_returns_whom_it_served(
    org: TenantFixture, other_org: TenantFixture, django_capture_on_commit_callbacks, settings
) -> None:
    settings.EXTRACTION_JOBS_PER_RUN = 1
    alice = org.organization.pk
    add(org, "importer-0", django_capture_on_commit_callbacks)
    add(org, "importer-1", django_capture_on_commit_callbacks)
    first, second = queued("ingest", EXTRACT_TASK)
    assert first["kwargs"] == {"queued_for_org": alice, "queued_for_user": "importer-0"}
    assert second["kwargs"] == {"queued_for_org": alice, "queued_for_user": "importer-1"}
    # Flower shows the message's kwargs (its repr, which its search parses) as sent.
    assert first["shown"] == first["kwargs"]

    with django_capture_on_commit_callbacks(execute=True):
        ran = extract_memories.apply(args=first["args"], kwargs=first["kwargs"]).get()
    [served] = ran
    assert (served["org"], served["user"], served["status"]) == (alice, "importer-0", "succeeded")
    assert served["job"] == first["args"][1] and served["messages"] == 2

    # Bob's turns arrive: the token queued for importer-1 runs them (bob's organization was
    # served least recently), and its result says so beside its labels.
    add(other_org, "chatter", django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        ran = extract_memories.apply(args=second["args"], kwargs=second["kwargs"]).get()
    assert [(job["org"], job["user"]) for job in ran] == [(other_org.organization.pk, "chatter")]


def test_an_extraction_message_queued_without_labels_still_runs(
    org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    add(org, "sam", django_capture_on_commit_callbacks)
    [message] = queued("ingest", EXTRACT_TASK)
    with django_capture_on_commit_callbacks(execute=True):
        ran = extract_memories.apply(args=message["args"]).get()
    assert [(job["user"], job["status"]) for job in ran] == [("sam", "succeeded")]
    # A delivery that finds nothing left to claim served no one.
    assert extract_memories.apply(args=message["args"]).get() == []


def test_the_recovery_job_publishes_extraction_again_with_its_labels(
    org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    add(org, "sam", django_capture_on_commit_callbacks)
    redis_client().delete("ingest")  # the broker lost it
    ExtractionJob.objects.update(created_at=timezone.now() - timedelta(minutes=5))
    recover_extraction_jobs.apply().get()
    [message] = queued("ingest", EXTRACT_TASK)
    assert message["kwargs"] == {
        "queued_for_org": org.organization.pk,
        "queued_for_user": "sam",
    }


def test_a_learning_run_is_labelled_with_its_owner_and_runs_with_or_without_labels(
    org: TenantFixture, django_capture_on_commit_callbacks, settings
) -> None:
    settings.LLM_PROVIDER = "none"
    with django_capture_on_commit_callbacks(execute=True):
        labelled = learning_run_create(org, user_id="sam")
        unlabelled = learning_run_create(org, user_id="kim")
    by_run = {message["args"][0]: message for message in queued("learning", LEARNING_RUN_TASK)}
    alice = org.organization.pk
    assert by_run[labelled.pk]["kwargs"] == {"org": alice, "user": "sam"}
    assert by_run[unlabelled.pk]["kwargs"] == {"org": alice, "user": "kim"}
    assert by_run[labelled.pk]["shown"] == {"org": alice, "user": "sam"}

    message = by_run[labelled.pk]
    assert learning_run_task.apply(args=message["args"], kwargs=message["kwargs"]).get() == (
        "succeeded"
    )
    assert learning_run_task.apply(args=[unlabelled.pk]).get() == "succeeded"


def test_the_learning_recovery_job_publishes_runs_again_with_their_labels(
    org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        run = learning_run_create(org, user_id="sam")
    redis_client().delete("learning")  # the broker lost it
    LearningRun.objects.update(created_at=timezone.now() - timedelta(minutes=5))
    with django_capture_on_commit_callbacks(execute=True):  # a worker runs in autocommit
        assert recover_learning_runs.apply().get() == 1
    [message] = queued("learning", LEARNING_RUN_TASK)
    assert message["args"] == [run.pk]
    assert message["kwargs"] == {"org": org.organization.pk, "user": "sam"}


def test_a_skill_edit_queues_its_embedding_labelled_with_the_skills_owner(
    org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    skill = skill_create(org, user_id="sam")
    with django_capture_on_commit_callbacks(execute=True):
        response = org.api.patch(
            f"/skills/{skill.pk}", {"description": "Read any CSV file."}, format="json"
        )
    assert response.status_code == 200, response.content
    [message] = queued("ingest", SKILLS_EMBED_TASK)
    assert message["args"] == [[skill.pk]]
    assert message["kwargs"] == {"org": org.organization.pk, "user": "sam"}
    assert skills_embed_task.apply(args=message["args"], kwargs=message["kwargs"]).get() == 1
    assert skills_embed_task.apply(args=message["args"]).get() == 1


def test_a_remote_image_fetch_is_labelled_with_its_organization(
    org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = org.api.post("/images", {"url": "https://images.example/cat.png"}, format="json")
    assert response.status_code == 202, response.content
    fetch = ImageFetch.objects.get()
    [message] = queued("images", IMAGE_FETCH_TASK)
    assert message["args"] == [fetch.pk]
    assert message["kwargs"] == {"org": org.organization.pk}

    redis_client().delete("images")  # the broker lost it
    ImageFetch.objects.update(created_at=timezone.now() - timedelta(minutes=5))
    assert recover_image_fetches.apply().get() == 1
    [again] = queued("images", IMAGE_FETCH_TASK)
    assert again["kwargs"] == {"org": org.organization.pk}

    # A fetch already done (here: gone) is left alone, whether the message has labels or not.
    fetch.delete()
    assert image_fetch_task.apply(args=again["args"], kwargs=again["kwargs"]).get() is None
    assert image_fetch_task.apply(args=again["args"]).get() is None
