"""The admin dashboard's page at 100,000 memories: ``GET /admin/`` timed against a live server.

The admin's index is the operators' dashboard (``mirix_site.console``): a page load reads the
roll-up table (``console_dailyfigure``, which beat's ``daily_figures_roll_up`` writes) and
bounded counts (a big table by PostgreSQL's estimate past 200,000 rows). This bench loads a
server of that size and times the page.

Data, into the demo tenant of the data directory (its key's client), one end user
``dash-<run id>-0`` holding:

- ``--scale`` episodic memories (default 100,000), loaded as ``bench.retrieval_latency`` loads
  them (``bench.memories_load``: COPY, BM25 postings, synthetic vectors, as the dashboard
  counts them and reads no vector), with the shared HNSW index dropped for the load and rebuilt
  after it, the tables vacuumed and the user's own HNSW index built, as beat would (not during
  the timing);
- the audit rows a server of that size has over the dashboard's 14 days, through
  ``bulk_create`` with their own timestamps (spread over the last 14 days): ``--retrievals``
  retrieval-log rows (default 100,000; latency log-normal, median ~15 ms, p95 ~55 ms),
  ``--sessions`` sessions (10,000, 5 % open, a few of those with turns waiting for
  extraction), ``--learning-runs`` learning runs (1,000: one queued, one running, the rest
  finished in mixed states), ``--skills`` skills (500) with three versions each on average, 40 %
  promoted and a quarter of those demoted again (their status history), and
  ``--recommendations`` recommendations (10,000) with an outcome recorded for half of them.

Then:

1. the roll-up (``daily_figures_roll_up``) in this process, timed from scratch (every figure
   deleted first) and again (the settled days kept): beat's cost at this size;
2. against the live server, an operator's session: a superuser the bench creates (random
   password, deleted at the end) logs in through the admin's login form; after ``--warmup``
   requests of each page, ``--requests`` GETs of ``/admin/`` and of a page without the
   dashboard (``/admin/password_change/``), interleaved, one at a time over one keep-alive
   connection: p50, p95 and max of both, the dashboard's p95 against the goal;
3. in this process: the SQL statements one page load runs (the test client, logged in), the
   slowest of them, and each part of the page timed alone (the roll-up's read, each app's
   panels, the health panels), to say what the page's time goes to.

Every row the bench created is deleted at the end unless ``--keep``, and the figures are rolled
up again without them (a settled day's figures are otherwise kept for good).

Goal: the dashboard index renders in < 500 ms p95 at 100,000 memories.

    API_RATE_LIMIT=10000000/min make run
    .venv/bin/python -m bench.dashboard [--scale 100000] [--retrievals 100000]
        [--requests 100] [--keep] [--base-url URL] [--data-dir DIR] [--api-key KEY] [--smoke]

Django is set up as ``bench.retrieval_latency`` sets it up (``--data-dir``, ``--database-url``;
in a process that has set Django up already, that setup and its database).

``--smoke``: a few hundred rows, a few requests; the shared HNSW index stays and nothing is
vacuumed (the database may be shared, as the test suite's is).
"""

from __future__ import annotations

import argparse
import http.client
import math
import random
import re
import secrets
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.cookies import SimpleCookie
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

from bench.common import (
    SMOKE_NOTE,
    BenchError,
    KeepAliveClient,
    api_key_read,
    arguments_parse,
    command_line,
    database_arguments,
    django_setup,
    load_average,
    percentile,
    server_arguments,
    tenant_from_key,
    verdict,
)
from bench.memories_load import (
    Layout,
    Vocabulary,
    beat_builds,
    corpus_texts,
    hnsw_kept,
    indexes_deferred,
    rows_load,
    searched_kind,
    synthetic_vectors,
    tables_vacuum,
    users_create,
    users_delete,
)

if TYPE_CHECKING:
    from django.db import models

    from accounts.tenancy import Tenant
    from mirix_site.search.kinds import SearchableKind

GOAL_P95_MS = 500.0
DASHBOARD_PATH = "/admin/"
BASELINE_PATH = "/admin/password_change/"
LOGIN_PATH = "/admin/login/"
# What only the dashboard's page says: a page without it is a login form or an error.
DASHBOARD_MARK = b"Memories by type"
BATCH_ROWS = 2000
DAYS = 14
OPEN_SESSIONS = 0.05
SESSIONS_WITH_TURNS_WAITING = 10
TURNS_WAITING_PER_SESSION = 3
VERSIONS_PER_SKILL = 3
PROMOTED_SKILLS = 0.4
DEMOTED_OF_PROMOTED = 0.25
FOLLOWED_RECOMMENDATIONS = 0.5
FINAL_RUN_STATES = {
    "succeeded": 0.8,
    "failed": 0.1,
    "context_limit": 0.05,
    "budget_exhausted": 0.05,
}
# Retrieval latency: log-normal, median ~15 ms, p95 ~55 ms.
LATENCY_MEDIAN_MS = 15.0
LATENCY_SIGMA = 0.8
PART_TIMINGS = 5
SLOWEST_SHOWN = 5
SMOKE = {
    "scale": 200,
    "retrievals": 300,
    "sessions": 40,
    "learning_runs": 20,
    "skills": 10,
    "recommendations": 40,
    "requests": 4,
    "warmup": 1,
}


@dataclass
class Run:
    """What the run made, for the clean-up: its user (and so every row it loaded) and the
    operator it logs in as."""

    run: str
    layout: Layout
    operator_id: int | None = None
    loaded: dict[str, int] = field(default_factory=dict)


# --- Loading -------------------------------------------------------------------------------------


@contextmanager
def timestamps_given(*models: type[models.Model]) -> Iterator[None]:
    """Inside, the models' ``auto_now``/``auto_now_add`` fields store the value a row is given
    (the bench's rows are dated over the dashboard's days), as a migration's data would."""
    fields = [
        model_field
        for model in models
        for model_field in model._meta.concrete_fields
        if getattr(model_field, "auto_now", False) or getattr(model_field, "auto_now_add", False)
    ]
    saved = [
        (model_field, model_field.auto_now, model_field.auto_now_add) for model_field in fields
    ]
    for model_field in fields:
        model_field.auto_now = model_field.auto_now_add = False
    try:
        yield
    finally:
        for model_field, auto_now, auto_now_add in saved:
            model_field.auto_now, model_field.auto_now_add = auto_now, auto_now_add


def _created(model: type[models.Model], rows: Sequence[models.Model]) -> list[models.Model]:
    with timestamps_given(model):
        return model.objects.bulk_create(rows, batch_size=BATCH_ROWS)


class Moments:
    """Random moments over the last ``DAYS`` days, up to ``now``."""

    def __init__(self, rng: random.Random, now: datetime) -> None:
        self.rng, self.now = rng, now

    def any(self) -> datetime:
        return self.now - timedelta(seconds=self.rng.random() * DAYS * 86400)

    def after(self, moment: datetime, *, hours: float) -> datetime:
        return min(moment + timedelta(seconds=self.rng.random() * hours * 3600), self.now)


def retrievals_load(owner: dict[str, Any], texts: list[str], count: int, moments: Moments) -> int:
    from mirix_site.search.models import RetrievalLog

    rng = moments.rng
    done = 0
    for start in range(0, count, BATCH_ROWS):
        rows = []
        for number in range(start, min(start + BATCH_ROWS, count)):
            ids = rng.sample(range(1, 1_000_000), 10)
            rows.append(
                RetrievalLog(
                    **owner,
                    endpoint="/memory/search",
                    query=" ".join(texts[number % len(texts)].split()[:6]),
                    method="hybrid",
                    kinds=["episodic"],
                    results=[
                        {"kind": "episodic", "id": row_id, "score": round(1 / (rank + 60), 6)}
                        for rank, row_id in enumerate(ids)
                    ],
                    gate={"decisions": {"kept": 10}},
                    latency_ms=rng.lognormvariate(math.log(LATENCY_MEDIAN_MS), LATENCY_SIGMA),
                    created_at=moments.any(),
                )
            )
        done += len(_created(RetrievalLog, rows))
    return done


def sessions_load(owner: dict[str, Any], count: int, moments: Moments) -> tuple[int, int]:
    """Sessions, 5 % open, and a few open ones with chat turns waiting for extraction."""
    from sessions.models import Message, Session

    rng = moments.rng
    sessions = []
    for number in range(count):
        created_at = moments.any()
        last_activity = moments.after(created_at, hours=2)
        is_open = number < count * OPEN_SESSIONS
        sessions.append(
            Session(
                **owner,
                session_id=f"dash-{number}",
                tag=Session.Tag.TASK if rng.random() < 0.2 else Session.Tag.CHAT,
                status=Session.Status.OPEN if is_open else Session.Status.CLOSED,
                close_reason="" if is_open else Session.CloseReason.IDLE,
                message_count=rng.randint(2, 40),
                created_at=created_at,
                last_activity_at=last_activity,
                closed_at=None if is_open else last_activity,
            )
        )
    created = _created(Session, sessions)
    waiting = [session for session in created if session.status == Session.Status.OPEN]
    turns = [
        Message(
            **owner,
            session=session,
            position=position,
            role=Message.Role.USER if position % 2 == 0 else Message.Role.ASSISTANT,
            content=[{"type": "text", "text": f"turn {position} of {session.session_id}"}],
            text=f"turn {position} of {session.session_id}",
            occurred_at=session.last_activity_at,
            created_at=session.last_activity_at,
        )
        for session in waiting[:SESSIONS_WITH_TURNS_WAITING]
        for position in range(TURNS_WAITING_PER_SESSION)
    ]
    return len(created), len(_created(Message, turns))


def learning_runs_load(owner: dict[str, Any], count: int, moments: Moments) -> int:
    """One queued and one running (a user has at most one of each), the rest finished."""
    from skills.models import LearningRun

    rng = moments.rng
    states, weights = zip(*FINAL_RUN_STATES.items(), strict=True)
    runs = []
    for number in range(count):
        created_at = moments.any()
        state = ("queued", "running")[number] if number < 2 else rng.choices(states, weights)[0]
        started = None if state == "queued" else moments.after(created_at, hours=0.1)
        finished = None if state in ("queued", "running") else moments.after(started, hours=0.2)
        runs.append(
            LearningRun(
                **owner,
                state=state,
                trigger=LearningRun.Trigger.THRESHOLD,
                attempts=0 if state == "queued" else 1,
                steps=rng.randint(1, 12),
                llm_calls=rng.randint(1, 30),
                created_at=created_at,
                started_at=started,
                heartbeat_at=started,
                finished_at=finished,
            )
        )
    return len(_created(LearningRun, runs))


def skills_load(owner: dict[str, Any], count: int, moments: Moments) -> tuple[int, int, int]:
    """Skills with their versions (one create, edits after it) and status history: some
    promoted to active, a quarter of those demoted (deprecated) since."""
    from skills.models import Skill, SkillVersion

    changes = Skill.history.rel.related_model  # type: ignore[attr-defined]
    rng = moments.rng
    births = [moments.any() for _ in range(count)]
    edits = [0] * count
    for _ in range(count * (VERSIONS_PER_SKILL - 1)):
        edits[rng.randrange(count)] += 1
    fates = []  # (status now, [(when, status before), ...])
    for born in births:
        if rng.random() >= PROMOTED_SKILLS:
            fates.append((Skill.Status.CANDIDATE, []))
            continue
        promoted = moments.after(born, hours=72)
        if rng.random() < DEMOTED_OF_PROMOTED:
            demoted = moments.after(promoted, hours=72)
            events = [(promoted, Skill.Status.CANDIDATE), (demoted, Skill.Status.ACTIVE)]
            fates.append((Skill.Status.DEPRECATED, events))
        else:
            fates.append((Skill.Status.ACTIVE, [(promoted, Skill.Status.CANDIDATE)]))
    skills = _created(
        Skill,
        [
            Skill(
                **owner,
                name=f"dash-skill-{number}",
                description=f"what skill {number} does",
                instructions="1. look\n2. act",
                status=status,
                version=1 + edits[number],
                created_at=born,
                updated_at=events[-1][0] if events else born,
            )
            for number, (born, (status, events)) in enumerate(zip(births, fates, strict=True))
        ],
    )
    versions = []
    for skill, born, extra in zip(skills, births, edits, strict=True):
        moment = born
        for number in range(1, extra + 2):
            versions.append(
                SkillVersion(
                    **owner,
                    skill=skill,
                    number=number,
                    snapshot={"name": skill.name, "description": skill.description},
                    author=SkillVersion.Author.CURATOR,
                    operation="create" if number == 1 else "edit",
                    created_at=moment,
                )
            )
            moment = moments.after(moment, hours=24)
    events = [
        changes(
            **owner,
            pgh_obj=skill,
            pgh_label="changed",
            pgh_context={"actor": "curator"},
            pgh_created_at=when,
            status=before,
        )
        for skill, (_status, history) in zip(skills, fates, strict=True)
        for when, before in history
    ]
    return len(skills), len(_created(SkillVersion, versions)), len(_created(changes, events))


def recommendations_load(owner: dict[str, Any], count: int, moments: Moments) -> tuple[int, int]:
    """Recommendations of every confidence, half of them followed, the outcome of each as likely
    a success as its confidence said."""
    from skills.models import Experience, Recommendation
    from skills.models.experiences import OUTCOME_SCORES, Outcome

    rng = moments.rng
    made = _created(
        Recommendation,
        [
            Recommendation(
                **owner,
                task=f"task {number % 300}",
                action=f"action {number % 40}",
                action_key=f"action {number % 40}",
                confidence=rng.random(),
                successes=rng.randint(0, 9),
                failures=rng.randint(0, 3),
                partials=rng.randint(0, 2),
                created_at=moments.any(),
            )
            for number in range(count)
        ],
    )
    outcomes = []
    for recommendation in rng.sample(made, int(len(made) * FOLLOWED_RECOMMENDATIONS)):
        outcome = Outcome.SUCCESS if rng.random() < recommendation.confidence else Outcome.FAILURE
        moment = moments.after(recommendation.created_at, hours=6)
        outcomes.append(
            Experience(
                **owner,
                task=recommendation.task,
                action=recommendation.action,
                action_key=recommendation.action_key,
                outcome=outcome,
                score=OUTCOME_SCORES[outcome],
                recommendation=recommendation,
                occurred_at=moment,
                created_at=moment,
                updated_at=moment,
            )
        )
    return len(made), len(_created(Experience, outcomes))


def audit_rows_load(
    tenant: Tenant, run: Run, arguments: argparse.Namespace, texts: list[str]
) -> None:
    from django.db import transaction

    owner = {
        "organization": tenant.organization,
        "client": tenant.client,
        "end_user_id": run.layout.pks[0],
    }
    moments = Moments(random.Random(f"{arguments.seed}:audit"), datetime.now(UTC))
    began = time.perf_counter()
    with transaction.atomic():
        run.loaded["retrieval logs"] = retrievals_load(owner, texts, arguments.retrievals, moments)
        run.loaded["sessions"], run.loaded["turns waiting"] = sessions_load(
            owner, arguments.sessions, moments
        )
        run.loaded["learning runs"] = learning_runs_load(owner, arguments.learning_runs, moments)
        run.loaded["skills"], run.loaded["skill versions"], run.loaded["status changes"] = (
            skills_load(owner, arguments.skills, moments)
        )
        run.loaded["recommendations"], run.loaded["outcomes"] = recommendations_load(
            owner, arguments.recommendations, moments
        )
    print(
        "  audit rows over 14 days in "
        f"{time.perf_counter() - began:.0f} s: "
        + ", ".join(f"{count:,} {name}" for name, count in run.loaded.items()),
        flush=True,
    )


def audit_tables() -> list[type[models.Model]]:
    from mirix_site.console.models import DailyFigure
    from mirix_site.search.models import RetrievalLog
    from sessions.models import Message, Session
    from skills.models import Experience, LearningRun, Recommendation, Skill, SkillVersion

    changes = Skill.history.rel.related_model  # type: ignore[attr-defined]
    return [
        RetrievalLog,
        Session,
        Message,
        LearningRun,
        Skill,
        SkillVersion,
        changes,
        Recommendation,
        Experience,
        DailyFigure,
    ]


def audit_tables_vacuum() -> None:
    """As autovacuum would leave them: statistics current (the counts' estimates read them)."""
    from django.db import connection

    began = time.perf_counter()
    with connection.cursor() as cursor:
        names = ", ".join(connection.ops.quote_name(m._meta.db_table) for m in audit_tables())
        cursor.execute(f"VACUUM (ANALYZE) {names}")
    print(f"  audit tables vacuumed and analysed in {time.perf_counter() - began:.0f} s")


def data_load(
    tenant: Tenant, kind: SearchableKind, run: Run, arguments: argparse.Namespace
) -> None:
    from mirix_site.providers.embeddings import embedding_provider_from_settings

    embedder = embedding_provider_from_settings()
    texts = corpus_texts(Vocabulary.load(), scale=arguments.scale, seed=arguments.seed)
    vectors = synthetic_vectors(
        arguments.scale, dimensions=embedder.dimensions, seed=arguments.seed
    )
    users_create(tenant, run.layout)
    print(f"loading into user {run.layout.user_ids[0]}", flush=True)
    with hnsw_kept(kind) if arguments.smoke else indexes_deferred(kind):
        rows_load(
            tenant=tenant,
            kind=kind,
            layout=run.layout,
            texts=texts,
            vectors=vectors,
            model_name=embedder.model_name,
        )
    audit_rows_load(tenant, run, arguments, texts)
    if not arguments.smoke:
        tables_vacuum(kind)
        audit_tables_vacuum()
    beat_builds()  # beat's, done now rather than while the page is timed


# --- The roll-up ---------------------------------------------------------------------------------


def roll_up_time() -> tuple[float, int, float, int]:
    """The roll-up from nothing (every figure deleted) and again: seconds and figures written."""
    from mirix_site.console.models import DailyFigure
    from mirix_site.console.services import daily_figures_roll_up

    DailyFigure.objects.all().delete()
    began = time.perf_counter()
    scratch = daily_figures_roll_up()
    scratch_seconds = time.perf_counter() - began
    began = time.perf_counter()
    again = daily_figures_roll_up()
    return scratch_seconds, scratch, time.perf_counter() - began, again


# --- The operator's session ----------------------------------------------------------------------


def operator_create(run: Run) -> tuple[str, str]:
    from django.contrib.auth import get_user_model

    username, password = f"dashbench-{run.run}", secrets.token_urlsafe(24)
    user = get_user_model().objects.create_superuser(
        username, f"{username}@bench.invalid", password
    )
    run.operator_id = user.pk
    return username, password


def _cookies(response: http.client.HTTPResponse) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    for header in response.headers.get_all("Set-Cookie") or []:
        jar.load(header)
    return {name: morsel.value for name, morsel in jar.items()}


def admin_login(base_url: str, username: str, password: str) -> str:
    """Log in through the admin's own form (its CSRF token and cookie, the credentials posted);
    returns the Cookie header of the session."""
    parts = urlsplit(base_url)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80)
    try:
        connection.request("GET", LOGIN_PATH)
        response = connection.getresponse()
        form = response.read().decode()
        cookies = _cookies(response)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
        if response.status != 200 or token is None or "csrftoken" not in cookies:
            raise BenchError(f"GET {LOGIN_PATH}: {response.status}, no login form with a token")
        body = urlencode(
            {
                "csrfmiddlewaretoken": token.group(1),
                "username": username,
                "password": password,
                "next": DASHBOARD_PATH,
            }
        )
        connection.request(
            "POST",
            LOGIN_PATH,
            body=body,
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "Cookie": f"csrftoken={cookies['csrftoken']}",
            },
        )
        response = connection.getresponse()
        response.read()
        cookies |= _cookies(response)
        if response.status != 302 or "sessionid" not in cookies:
            raise BenchError(
                f"POST {LOGIN_PATH}: {response.status}, no session: the server refused the "
                "bench's operator (is it on the bench's database?)"
            )
    finally:
        connection.close()
    return "; ".join(f"{name}={value}" for name, value in cookies.items())


@dataclass
class PageTimes:
    path: str
    latencies_ms: list[float] = field(default_factory=list)

    def line(self) -> str:
        values = self.latencies_ms
        return (
            f"GET {self.path:<26} p50 {percentile(values, 0.5):7.1f} ms   "
            f"p95 {percentile(values, 0.95):7.1f} ms   max {max(values):7.1f} ms   "
            f"({len(values)} requests)"
        )


def page_get(client: KeepAliveClient, path: str) -> float:
    reply = client.exchange("GET", path)
    if reply.status != 200:
        raise BenchError(f"GET {path}: {reply.status} (location {reply.headers.get('Location')})")
    if path == DASHBOARD_PATH and DASHBOARD_MARK not in reply.body:
        raise BenchError(f"GET {path}: 200 without the dashboard on it")
    return reply.elapsed_ms


def pages_time(
    arguments: argparse.Namespace, api_key: str, cookie: str
) -> tuple[PageTimes, PageTimes, int]:
    """Warm-up, then the two pages one after the other, ``--requests`` times each."""
    client = KeepAliveClient(arguments.base_url, api_key, timeout=60)
    client.headers = {"Cookie": cookie}
    dashboard, baseline = PageTimes(DASHBOARD_PATH), PageTimes(BASELINE_PATH)
    try:
        for _ in range(arguments.warmup):
            page_get(client, DASHBOARD_PATH)
            page_get(client, BASELINE_PATH)
        for _ in range(arguments.requests):
            dashboard.latencies_ms.append(page_get(client, DASHBOARD_PATH))
            baseline.latencies_ms.append(page_get(client, BASELINE_PATH))
    finally:
        client.close()
    return dashboard, baseline, client.reconnects


# --- In this process: the page's statements and parts --------------------------------------------


def page_statements(operator_id: int, *, scale: int) -> list[dict[str, str]]:
    """The SQL one load of the page runs (after a first load: the session's own reads); and
    a check that the page counts the memories loaded."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(SERVER_NAME="127.0.0.1")
    client.force_login(get_user_model().objects.get(pk=operator_id))
    client.get(DASHBOARD_PATH)
    with CaptureQueriesContext(connection) as captured:
        response = client.get(DASHBOARD_PATH)
    if response.status_code != 200 or DASHBOARD_MARK not in response.content:
        raise BenchError(f"in-process GET {DASHBOARD_PATH}: {response.status_code}")
    episodic = re.search(rb'data-label="Episodic memories" data-value="([\d.]+)"', response.content)
    if episodic is None or float(episodic.group(1)) < scale:
        raise BenchError(f"the dashboard does not count the {scale:,} memories loaded")
    return captured.captured_queries


def _median_ms(call: Callable[[], object]) -> float:
    times = []
    for _ in range(PART_TIMINGS):
        began = time.perf_counter()
        call()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def parts_time() -> list[tuple[str, float]]:
    """Each part of the page alone, median of a few calls: the roll-up's read, each app's
    panels (by the module that registered them), the health panels."""
    from mirix_site.console.panels import Dashboard, panel_sources
    from mirix_site.console.site import health_panels

    dashboard = Dashboard()
    parts = [("Dashboard() (the roll-up's rows)", _median_ms(Dashboard))]
    for source in panel_sources():
        parts.append((f"{source.__module__} panels", _median_ms(lambda s=source: s(dashboard))))
    parts.append(("health_panels()", _median_ms(health_panels)))
    return parts


# --- Clean-up ------------------------------------------------------------------------------------


def cleanup(run: Run, kind: SearchableKind, *, smoke: bool) -> None:
    """The operator; and, unless kept, the user with every row loaded for them (the memories
    without the shared HNSW index, rebuilt after, as ``bench.retrieval_latency`` deletes), then
    the figures rolled up again without them."""
    from django.contrib.auth import get_user_model

    from mirix_site.console.models import DailyFigure
    from mirix_site.console.services import daily_figures_roll_up

    if run.operator_id is not None:
        get_user_model().objects.filter(pk=run.operator_id).delete()
        run.operator_id = None
    if not run.layout.pks:
        return
    began = time.perf_counter()
    with hnsw_kept(kind) if smoke else indexes_deferred(kind):
        users_delete(kind, run.layout.pks)
    if not smoke:
        tables_vacuum(kind)
        audit_tables_vacuum()
    beat_builds()
    DailyFigure.objects.all().delete()
    daily_figures_roll_up()
    print(
        f"deleted user {run.layout.user_ids[0]} and every row loaded for them, figures rolled "
        f"up again, in {time.perf_counter() - began:.0f} s"
    )
    run.layout.pks = []


# --- The run -------------------------------------------------------------------------------------


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    server_arguments(parser, key_help="default: <data dir>/demo-api-key")
    database_arguments(parser)
    parser.add_argument("--scale", type=int, default=100_000, help="episodic memories")
    parser.add_argument("--retrievals", type=int, default=100_000, help="retrieval-log rows")
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--learning-runs", type=int, default=1000)
    parser.add_argument("--skills", type=int, default=500, help=f"x{VERSIONS_PER_SKILL} versions")
    parser.add_argument("--recommendations", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=100, help="timed GETs of each page")
    parser.add_argument("--warmup", type=int, default=5, help="unmeasured GETs of each page")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the bench's user and rows")
    arguments = arguments_parse(parser, argv, smoke=SMOKE)
    if arguments.scale < 1 or arguments.learning_runs < 2 or arguments.requests < 1:
        parser.error("need --scale >= 1, --learning-runs >= 2, --requests >= 1")
    arguments.data_dir = arguments.data_dir.resolve()
    return arguments


def bench(arguments: argparse.Namespace, argv: Sequence[str]) -> None:
    api_key = api_key_read(arguments, key_file=arguments.data_dir / "demo-api-key")
    database = django_setup(arguments)
    tenant = tenant_from_key(api_key)
    kind = searched_kind()
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    run = Run(stamp, Layout("dashboard", [f"dash-{stamp}-0"], [arguments.scale]))
    print(
        f"{command_line('bench.dashboard', argv)}\nrun {stamp}: server {arguments.base_url}, "
        f"database {database}, organization {tenant.organization.pk}\n"
        f"load average before: {load_average()}",
        flush=True,
    )
    try:
        data_load(tenant, kind, run, arguments)
        scratch_s, scratch_rows, again_s, again_rows = roll_up_time()
        print(
            f"roll-up: from scratch {scratch_s * 1000:.0f} ms ({scratch_rows:,} figures), "
            f"again {again_s * 1000:.0f} ms ({again_rows:,} figures: the settled days kept)",
            flush=True,
        )
        username, password = operator_create(run)
        try:
            cookie = admin_login(arguments.base_url, username, password)
            dashboard, baseline, reconnects = pages_time(arguments, api_key, cookie)
        except OSError as error:
            raise BenchError(f"{arguments.base_url}: {error} (is the server running?)") from error
        statements = page_statements(run.operator_id, scale=arguments.scale)
        parts = parts_time()
        print(f"load average after: {load_average()}")
        report(
            arguments=arguments,
            dashboard=dashboard,
            baseline=baseline,
            reconnects=reconnects,
            statements=statements,
            parts=parts,
        )
    finally:
        if arguments.keep:
            run.layout.pks, kept = [], run.layout.user_ids[0]
            print(f"kept user {kept} and their rows (--keep)")
        cleanup(run, kind, smoke=arguments.smoke)


def report(
    *,
    arguments: argparse.Namespace,
    dashboard: PageTimes,
    baseline: PageTimes,
    reconnects: int,
    statements: list[dict[str, str]],
    parts: list[tuple[str, float]],
) -> None:
    print(
        f"\n{arguments.requests} requests of each page, interleaved, one at a time over one "
        f"keep-alive connection ({reconnects} reconnects)"
    )
    print(dashboard.line())
    print(baseline.line())
    p95 = percentile(dashboard.latencies_ms, 0.95)
    print(
        f"goal, dashboard p95 < {GOAL_P95_MS:.0f} ms at {arguments.scale:,} memories: "
        f"{p95:.1f} ms {verdict(p95 < GOAL_P95_MS)}"
    )
    total_ms = sum(float(query["time"]) for query in statements) * 1000
    print(
        f"\nSQL statements of one page load: {len(statements)} ({total_ms:.0f} ms in the "
        "database, as this process saw it; Django times each to the millisecond); the slowest:"
    )
    slowest = sorted(statements, key=lambda query: float(query["time"]), reverse=True)
    for query in slowest[:SLOWEST_SHOWN]:
        print(f"  {float(query['time']) * 1000:4.0f} ms  {query['sql'][:150]}")
    print(f"\nthe page's parts, each alone in this process (median of {PART_TIMINGS} calls):")
    for name, milliseconds in parts:
        print(f"  {name:<44} {milliseconds:7.1f} ms")
    if arguments.smoke:
        print(SMOKE_NOTE)


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    arguments = _arguments(given)
    try:
        bench(arguments, given)
    except BenchError as error:
        print(error, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted (the bench's rows were deleted)", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
