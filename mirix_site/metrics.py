"""``GET /metrics``: the server in Prometheus's text format, for the monitoring stack an operator
already runs — requests and their latency per route, the Celery queues' lengths, how far
extraction lags, learning runs waiting and running, whether PostgreSQL and Redis answer.

Request figures come from every web process: ``make run`` gives gunicorn's workers a directory
of their own (``PROMETHEUS_MULTIPROC_DIR``, emptied at start, prometheus_client's multiprocess
mode) and a scrape sums them. The rest is read when scraped, with bounded queries (indexes on
the waiting rows only; no count over a whole table). With ``METRICS_TOKEN`` set a scrape must
send ``Authorization: Bearer <token>``; without it the endpoint is open, as ``/health`` is.
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Callable, Generator, Iterator

import redis
from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from kombu.transport.redis import PRIORITY_STEPS, Channel
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from memory.selectors import extraction_backlog
from mirix_site.api.errors import error_body
from mirix_site.common.redis import redis_client
from skills.embedding_queue import QUEUE as EXPERIENCES_TO_EMBED
from skills.selectors import learning_runs_waiting

logger = logging.getLogger(__name__)

REQUESTS = Counter(
    "mirix_http_requests",
    "HTTP requests answered, by route (the URL pattern), method and status.",
    ["route", "method", "status"],
)
LATENCY = Histogram(
    "mirix_http_request_duration_seconds",
    "Time from the request reaching Django to its answer, by route and method.",
    ["route", "method"],
    buckets=(0.005, 0.01, 0.015, 0.025, 0.04, 0.06, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)

# A request no URL pattern matched: its path is not a label (it could be anything).
UNMATCHED = "unmatched"


class MetricsMiddleware:
    """Counts and times every answer by its route; the route is the URL pattern
    (``memory/<str:memory_type>/<str:memory_id>``), so the labels stay few."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = match.route if match is not None else UNMATCHED
        LATENCY.labels(route, request.method).observe(time.perf_counter() - started)
        REQUESTS.labels(route, request.method, str(response.status_code)).inc()
        return response


def celery_queues() -> list[str]:
    """The queues the worker consumes, as routed in settings."""
    return sorted({route["queue"] for route in settings.CELERY_TASK_ROUTES.values()})


def queue_lengths() -> dict[str, int] | None:
    """Tasks waiting in each Celery queue, and experiences waiting for their embedding (None:
    Redis does not answer). One round trip."""
    names = celery_queues()
    try:
        with redis_client().pipeline(transaction=False) as pipe:
            for name in names:
                for priority in PRIORITY_STEPS:  # kombu keeps a list per priority step
                    pipe.llen(f"{name}{Channel.sep}{priority}" if priority else name)
            pipe.llen(EXPERIENCES_TO_EMBED)
            lengths = pipe.execute()
    except redis.RedisError:
        logger.warning("queue lengths: redis unreachable")
        return None
    steps = len(PRIORITY_STEPS)
    waiting = {
        name: sum(lengths[index * steps : (index + 1) * steps]) for index, name in enumerate(names)
    }
    return {**waiting, "experiences-to-embed": lengths[-1]}


class ServerStateCollector(Collector):
    """What is waiting and what answers, read at each scrape."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        redis_up = yield from self._queues()
        database_up = yield from self._database()
        up = GaugeMetricFamily(
            "mirix_component_up", "1 when the component answers this scrape.", labels=["component"]
        )
        up.add_metric(["redis"], float(redis_up))
        up.add_metric(["database"], float(database_up))
        yield up

    def _queues(self) -> Generator[GaugeMetricFamily, None, bool]:
        lengths = queue_lengths()
        if lengths is None:
            return False
        queues = GaugeMetricFamily(
            "mirix_queue_length",
            "Tasks waiting in each Celery queue, and experiences waiting for their embedding.",
            labels=["queue"],
        )
        for name, length in lengths.items():
            queues.add_metric([name], float(length))
        yield queues
        return True

    def _database(self) -> Generator[GaugeMetricFamily, None, bool]:
        try:
            waiting, oldest = extraction_backlog()
            runs = learning_runs_waiting()
        except DatabaseError:
            logger.warning("metrics: database unreachable", exc_info=True)
            connection.close_if_unusable_or_obsolete()
            return False
        jobs = GaugeMetricFamily(
            "mirix_extraction_jobs_waiting", "Extraction jobs queued for the worker."
        )
        jobs.add_metric([], float(waiting))
        yield jobs
        lag = GaugeMetricFamily(
            "mirix_extraction_lag_seconds",
            "How long the oldest queued extraction job has waited (0: none waits).",
        )
        lag.add_metric([], (timezone.now() - oldest).total_seconds() if oldest else 0.0)
        yield lag
        learning = GaugeMetricFamily(
            "mirix_learning_runs", "Learning runs by state (queued, running).", labels=["state"]
        )
        for state, count in runs.items():
            learning.add_metric([state], float(count))
        yield learning
        return True


_STATE = ServerStateCollector()


def _registry() -> CollectorRegistry:
    """Every process's request figures (multiprocess mode) or this one's, and the state."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = CollectorRegistry()
        for collector in (REQUESTS, LATENCY):
            registry.register(collector)
    registry.register(_STATE)
    return registry


def _authorized(request: HttpRequest) -> bool:
    token = settings.METRICS_TOKEN
    if not token:
        return True
    given = request.headers.get("Authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


def metrics_view(request: HttpRequest) -> HttpResponse:
    if request.method != "GET":
        return JsonResponse(
            error_body(f'Method "{request.method}" not allowed.', "method_not_allowed"),
            status=405,
            headers={"Allow": "GET"},
        )
    if not _authorized(request):
        return JsonResponse(
            error_body(
                "A scrape sends Authorization: Bearer <METRICS_TOKEN>.", "not_authenticated"
            ),
            status=401,
            headers={"WWW-Authenticate": "Bearer"},
        )
    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_LATEST)
