"""Where a recommend's time goes, and the least it can take on this machine: the steps of its
critical path timed one at a time in this process, beside whole recommends in this process and
over HTTP, against a user that ``bench.experiences --keep`` left (10,000 experiences).

A recommend (``skills.services.retrieval.experience_recommend``) embeds the task; its vector
lane waits for that embedding, while BM25, the caller's scope and the distances of BM25's hits
are read beside; then the rows found are read, their actions grouped, and the recommendation
and the retrieval log written. Each figure is a p50 over fresh tasks drawn as
``bench.experiences`` draws its queries (a seed of this run's own, so the server's cache of
query embeddings holds none of them):

- embed: the model run on the task alone (no cache), at the web's EMBEDDING_THREADS;
- vector lane: ``vector_search`` of the user's experiences for recommend's rows
  (RECOMMEND_EVIDENCE x the engine's OVERFETCH) and for recall's (k = 5), query embedded first;
- BM25 lane: ``bm25_search`` for recommend's rows;
- in-process: ``experience_recommend`` whole, and its part after the search (the log and the
  recommendation written, the actions grouped): whole - the search's wall time
  (``SearchOutcome.wall_ms``, the embedding included: nothing started it before);
- HTTP: ``GET /experiences/recommend`` as a client sees it, and ``GET /experiences/settings``
  (authenticated, one small read): what any request costs before its own work.

The floor is embed + vector lane + after the search + the authenticated request: the critical
path with nothing beside it and the rows' read left out, so a lower bound. Run against the
server's database (``--data-dir`` / ``--database-url``) and, for the HTTP figures, the server:

    .venv/bin/python -m bench.recommend_path --user exbench-... [--queries 200]
        [--base-url URL] [--api-key KEY] [--data-dir DIR] [--no-http] [--smoke]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from urllib.parse import quote, urlencode

from bench.common import (
    SMOKE_NOTE,
    BenchError,
    KeepAliveClient,
    api_key_read,
    arguments_parse,
    database_arguments,
    django_setup,
    load_average,
    percentile,
    run_start,
    server_arguments,
    tenant_from_key,
)
from bench.experiences_data import data_generate

SMOKE = {"queries": 4}
RECALL_K = 5


def _timed(function: Callable[[], object]) -> float:
    began = time.perf_counter()
    function()
    return (time.perf_counter() - began) * 1000


def _tasks(count: int, *, salt: str) -> list[str]:
    data = data_generate(experiences=0, queries=count, warmup=0, seed=7, query_seed=salt)
    return data.recommend_queries


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    server_arguments(parser, key_help="default: <data dir>/demo-api-key")
    parser.add_argument("--user", required=True, help="a user bench.experiences --keep left")
    parser.add_argument("--queries", type=int, default=200, help="measured tasks per figure")
    database_arguments(parser)
    parser.add_argument("--no-http", action="store_true", help="only the in-process figures")
    arguments = arguments_parse(parser, argv, smoke=SMOKE)
    if arguments.queries < 1:
        parser.error("--queries must be at least 1")
    arguments.data_dir = arguments.data_dir.resolve()
    return arguments


def bench(arguments: argparse.Namespace) -> dict[str, float]:
    """Each figure's p50, in ms (the HTTP ones only when asked)."""
    django_setup(arguments)
    from django.conf import settings

    from accounts.models import EndUser
    from accounts.tenancy import Scope
    from mirix_site.search.bm25 import bm25_search
    from mirix_site.search.engine import OVERFETCH
    from mirix_site.search.spaces import read_embedder
    from mirix_site.search.vectors import vector_search
    from skills.search import EXPERIENCE_KIND
    from skills.services.retrieval import experience_recommend

    api_key = api_key_read(arguments, key_file=arguments.data_dir / "demo-api-key")
    tenant = tenant_from_key(api_key)
    end_user = EndUser.objects.filter(
        organization=tenant.organization, user_id=arguments.user
    ).first()
    if end_user is None:
        raise BenchError(f"no user {arguments.user!r} in the key's organization")
    scope = Scope.readable_by(tenant, end_user=end_user)
    embedder = read_embedder()
    depth = settings.RECOMMEND_EVIDENCE * OVERFETCH
    run = uuid.uuid4().hex[:8]
    figures: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        figures.setdefault(name, []).append(value)

    # Whole recommends first, each task new to the embedding cache.
    for task in _tasks(arguments.queries, salt=f"path-{run}-whole"):
        began = time.perf_counter()
        found = experience_recommend(tenant=tenant, end_user=end_user, task=task)
        whole = (time.perf_counter() - began) * 1000
        add("in-process recommend", whole)
        add("in-process after the search", whole - found.outcome.wall_ms)
    if not arguments.no_http:
        client = KeepAliveClient(arguments.base_url, api_key, timeout=60)
        for task in _tasks(arguments.queries, salt=f"path-{run}-http"):
            query = urlencode({"user_id": arguments.user, "task": task}, quote_via=quote)
            reply = client.exchange("GET", f"/experiences/recommend?{query}")
            if reply.status != 200:
                raise BenchError(f"recommend answered {reply.status}: {reply.body[:200]!r}")
            add("HTTP recommend", reply.elapsed_ms)
            reply = client.exchange("GET", "/experiences/settings")
            if reply.status != 200:
                raise BenchError(f"settings answered {reply.status}: {reply.body[:200]!r}")
            add("HTTP authenticated request", reply.elapsed_ms)
    for task in _tasks(arguments.queries, salt=f"path-{run}-steps"):
        began = time.perf_counter()
        [vector] = embedder.embed([task])
        add("embed", (time.perf_counter() - began) * 1000)
        for label, fetch in (
            ("vector lane, recommend", depth),
            ("vector lane, recall", RECALL_K * OVERFETCH),
        ):
            add(
                label,
                _timed(
                    partial(
                        vector_search,
                        scope=scope,
                        kind=EXPERIENCE_KIND,
                        vector=vector,
                        model=embedder.model_name,
                        limit=fetch,
                    )
                ),
            )
        add(
            "BM25 lane, recommend",
            _timed(
                partial(bm25_search, scope=scope, kind=EXPERIENCE_KIND, query=task, limit=depth)
            ),
        )
    return {name: percentile(values, 0.5) for name, values in figures.items()}


def report(figures: dict[str, float]) -> None:
    for name, value in figures.items():
        print(f"{name:32} p50 {value:6.2f} ms")
    floor = (
        figures["embed"]
        + figures["vector lane, recommend"]
        + figures["in-process after the search"]
    )
    print(f"{'floor in-process':32}     {floor:6.2f} ms  (embed + vector lane + after the search)")
    if "HTTP authenticated request" in figures:
        floor += figures["HTTP authenticated request"]
        print(
            f"{'floor over HTTP':32}     {floor:6.2f} ms  (+ an authenticated request; "
            f"measured {figures['HTTP recommend']:.2f})"
        )


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _arguments(argv)
    run_start("bench.recommend_path", argv)
    try:
        figures = bench(arguments)
    except BenchError as error:
        print(error, file=sys.stderr)
        return 1
    report(figures)
    print(f"load average at end (1/5/15 min): {load_average()}")
    if arguments.smoke:
        print(SMOKE_NOTE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
