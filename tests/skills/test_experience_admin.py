"""Experiences in the admin: filtered by outcome, origin, whether superseded, user and run; an
operator supersedes one by another of the same user and client, through the service."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from mirix_site.common.history import history_of
from skills.models import Experience
from tests.factories import TenantFixture, learning_run_create
from tests.skills.experiences import record

TASK = "login page times out under load"


@pytest.fixture
def operator(client, db):
    user = get_user_model().objects.create_superuser("operator", "op@example.com", "pw")
    client.force_login(user)
    return client


def test_an_operator_supersedes_an_experience_by_another_of_its_user(
    operator, org: TenantFixture, other_org: TenantFixture
) -> None:
    old = record(org, task=TASK, action="restart the pods", outcome="failure")
    new = record(org, task=TASK, action="add a redis cache", outcome="success")
    stranger = record(org, user_id="bea", task=TASK, action="x", outcome="success")
    foreign = record(other_org, task=TASK, action="y", outcome="success")
    url = f"/admin/skills/experience/{old['id']}/supersede/"
    page = operator.get(f"/admin/skills/experience/{old['id']}/change/")
    assert url in page.content.decode()

    for refused in (stranger["id"], foreign["id"], old["id"], 987654321):
        answer = operator.post(url, {"by": refused})
        assert answer.status_code == 200  # the form again, with why
        assert Experience.objects.get(pk=old["id"]).superseded_by_id is None
    assert "same user and client" in operator.post(url, {"by": foreign["id"]}).content.decode()
    assert "cannot supersede itself" in operator.post(url, {"by": old["id"]}).content.decode()

    done = operator.post(url, {"by": new["id"]})
    assert done.status_code == 302
    row = Experience.objects.get(pk=old["id"])
    assert row.superseded_by_id == int(new["id"]) and row.superseded_at is not None
    [change] = org.api.get(f"/experiences/{old['id']}/history").json()["history"]
    assert change["actor"] == "operator"  # the API names an operator by role only
    [kept] = history_of(row)
    assert kept["operator"] == "operator" and kept["changes"]["superseded_by"]["after"]
    recalled = org.api.get("/experiences/recall", {"user_id": "ada", "query": TASK}).json()
    found = [item["id"] for item in recalled["results"]]
    assert new["id"] in found and old["id"] not in found

    current = operator.get("/admin/skills/experience/?superseded=no").content.decode()
    superseded = operator.get("/admin/skills/experience/?superseded=yes").content.decode()
    assert "restart the pods" in superseded and "restart the pods" not in current
    assert "add a redis cache" in current


def test_a_learning_runs_page_links_to_its_experiences(operator, org: TenantFixture) -> None:
    run = learning_run_create(org, user_id="sam")
    page = operator.get(f"/admin/skills/learningrun/{run.pk}/change/").content.decode()
    assert f"/admin/skills/experience/?distilled_by__id__exact={run.pk}" in page
    listed = operator.get(f"/admin/skills/experience/?distilled_by__id__exact={run.pk}")
    assert listed.status_code == 200
