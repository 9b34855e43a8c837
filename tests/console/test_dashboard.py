"""The admin's index is the operators' dashboard: every chart drawn from the rows, linking into
the lists it counts, its page a bounded number of queries whatever the tables hold, its daily
figures rolled up by the worker."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memory.models import EpisodicMemory, ResourceMemory
from mirix_site.common import counts
from mirix_site.console.models import DailyFigure
from mirix_site.console.services import daily_figures_roll_up
from mirix_site.search.models import RetrievalLog
from sessions.models import Message, Session
from skills.confidence import confidence_band
from skills.models import LearningRun, Recommendation, Skill
from tests.factories import (
    TenantFixture,
    chat_turns,
    learning_run_create,
    memories_create,
    skill_create,
)
from tests.skills.experiences import record, record_many

TASK = "login page times out under load"


@pytest.fixture
def operator(client, db):
    user = get_user_model().objects.create_superuser("operator", "op@example.com", "pw")
    client.force_login(user)
    return client


def _bars(page: str) -> dict[str, str]:
    return dict(re.findall(r'data-label="([^"]+)" data-value="([^"]+)"', page))


def _marks(page: str) -> dict[tuple[str, str], float]:
    found = re.findall(r'data-day="([^"]+)" data-series="([^"]+)" data-value="([^"]+)"', page)
    return {(day, series): float(value) for day, series, value in found}


def _seed(org: TenantFixture) -> dict[str, object]:
    memories_create(org, user_id="sam")  # every memory type, and one retrieval
    for query in ("draft", "tea"):
        assert org.api.get("/memory/search", {"user_id": "sam", "query": query}).status_code == 200
    org.api.post(
        "/memory/add",
        {"user_id": "sam", "messages": chat_turns("I moved to Berlin", "Noted.")},
        format="json",
    )  # turns waiting: no worker here
    run = learning_run_create(org, user_id="sam")  # five closed task sessions, a queued run
    skill = skill_create(org, user_id="sam")
    promoted = org.api.patch(f"/skills/{skill.pk}", {"status": "active"}, format="json")
    assert promoted.status_code == 200, promoted.json()
    demoted = skill_create(org, user_id="sam", name="deploy-on-friday")
    demoted.status = Skill.Status.DEPRECATED  # as a curator's deprecation leaves it
    demoted.save(update_fields=["status"])
    record_many(org, [{"task": TASK, "action": "add a redis cache", "outcome": "success"}] * 2)
    advice = org.api.get("/experiences/recommend", {"user_id": "ada", "task": TASK}).json()
    record(
        org,
        task=TASK,
        action="add a redis cache",
        outcome="success",
        recommendation_id=advice["recommendation_id"],
    )
    return {"run": run, "confidence": advice["confidence"]}


def test_the_dashboard_draws_every_chart_from_the_rows(operator, org: TenantFixture) -> None:
    seeded = _seed(org)
    before = operator.get("/admin/").content.decode()
    assert "no roll-up yet" in before  # the worker's pulse: nothing rolled up

    daily_figures_roll_up()
    page = operator.get("/admin/")
    assert page.status_code == 200
    html = page.content.decode()
    today = timezone.now().date().isoformat()

    bars = _bars(html)
    assert float(bars["Episodic memories"]) == EpisodicMemory.objects.count() > 0
    assert float(bars["Resource memories"]) == ResourceMemory.objects.count() > 0
    assert float(bars["open"]) == Session.objects.filter(status="open").count() > 0
    assert float(bars["closed"]) == Session.objects.filter(status="closed").count() == 5
    assert '<a href="/admin/memory/episodicmemory/">' in html
    assert '<a href="/admin/conversations/session/?status__exact=closed">' in html
    waiting = Message.objects.filter(extraction="pending").count()
    assert waiting == 2 and f"<td>{waiting}</td>" in html

    marks = _marks(html)
    # The searches, and the recommendation's own retrieval.
    assert marks[(today, "retrievals")] == RetrievalLog.objects.count() == 4
    assert marks[(today, "p95")] >= marks[(today, "p50")] > 0
    assert f'href="/admin/search/retrievallog/?created_at__date={today}"' in html
    assert marks[(today, "queued")] == 1 == LearningRun.objects.filter(state="queued").count()
    assert f"/admin/skills/learningrun/?state__exact=queued&amp;created_at__date={today}" in html
    assert marks[(today, "created")] == 2  # two skills written
    assert marks[(today, "promoted")] == 1 and marks[(today, "demoted")] == 1

    low, high = confidence_band(seeded["confidence"])
    assert Recommendation.objects.count() == 1
    band_row = re.search(
        rf"<tr><td>{low:.1f}-{high:.1f}</td><td>1</td><td>1</td><td>1.00</td>", html
    )
    assert band_row, "the band of the one recommendation: issued 1, one outcome, a success"

    assert "Health" in html and "<td>PostgreSQL</td><td>ok</td>" in html
    assert "<td>Redis</td><td>ok</td>" in html
    assert re.search(r"ok: last roll-up \d+ s ago", html)
    assert 'data-label="ingest"' in html  # the worker queues' lengths


def test_the_page_reads_the_same_few_queries_whatever_the_tables_hold(
    operator, org: TenantFixture
) -> None:
    daily_figures_roll_up()
    operator.get("/admin/")  # the session's and permissions' first reads
    with CaptureQueriesContext(connection) as empty:
        operator.get("/admin/")
    _seed(org)
    daily_figures_roll_up()
    with CaptureQueriesContext(connection) as full:
        assert operator.get("/admin/").status_code == 200
    assert len(full) == len(empty) <= 40
    # No statement scans a whole big table: counts of the big ones read pg_class first.
    assert not any('FROM "memory_retrievallog"' in q["sql"] for q in full.captured_queries)


def test_a_big_table_is_shown_by_its_estimate(operator, org: TenantFixture, monkeypatch) -> None:
    memories_create(org, user_id="sam")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memory_episodicmemory")
    count = EpisodicMemory.objects.count()

    def episodic_shown() -> str:
        # The bar's own figure (the panel's note mentions ≈ whatever the counts are).
        html = operator.get("/admin/").content.decode()
        shown = re.search(r"<title>Episodic memories: ([^<]+)</title>", html)
        assert shown
        return shown.group(1)

    assert episodic_shown() == f"{count:,}"  # a small table: counted
    monkeypatch.setattr(counts, "EXACT_COUNT_MAX", count)
    assert episodic_shown() == f"≈ {count:,}"  # as big as the limit: PostgreSQL's estimate


def test_the_roll_up_keeps_settled_days_and_recomputes_recent_ones(org: TenantFixture) -> None:
    org.api.post("/users/create_or_get", {"user_id": "sam"}, format="json")
    for query in ("draft", "tea", "cake"):
        org.api.get("/memory/search", {"user_id": "sam", "query": query})
    five_days_ago = timezone.now() - timedelta(days=5)
    RetrievalLog.objects.filter(query="cake").update(created_at=five_days_ago)
    daily_figures_roll_up()
    figures = dict(
        DailyFigure.objects.filter(series="retrievals", key="count").values_list("day", "value")
    )
    today = timezone.now().date()
    assert figures[today] == 2 and figures[five_days_ago.date()] == 1
    assert len(figures) == 14  # every day of the window, zero where none

    RetrievalLog.objects.all().delete()  # the purge of an old day, and today's rows too
    assert daily_figures_roll_up() > 0
    figures = dict(
        DailyFigure.objects.filter(series="retrievals", key="count").values_list("day", "value")
    )
    assert figures[today] == 0  # today is computed again
    assert figures[five_days_ago.date()] == 1  # a settled day is kept


def test_the_roll_up_is_a_beat_job_of_the_maintenance_queue(settings) -> None:
    from mirix_site.celery import app

    app.loader.import_default_modules()  # what a worker does at start: the apps' tasks
    [entry] = [
        entry
        for entry in settings.CELERY_BEAT_SCHEDULE.values()
        if entry["task"] == "mirix_site.console.tasks.roll_up_daily_figures"
    ]
    assert entry["schedule"] == settings.DASHBOARD_ROLL_UP_SECONDS
    assert entry["task"] in app.tasks
    assert settings.CELERY_TASK_ROUTES[entry["task"]] == {"queue": "maintenance"}


def test_a_skill_page_draws_its_uses_and_status_changes(operator, org: TenantFixture) -> None:
    skill = skill_create(org, user_id="sam")
    org.api.patch(f"/skills/{skill.pk}", {"status": "active"}, format="json")
    html = operator.get(f"/admin/skills/skill/{skill.pk}/change/").content.decode()
    assert "Uses over time" in html and "the skill&#x27;s uses per day by outcome" in html
    assert "candidate &rarr; active" in html  # its status history, with who changed it
