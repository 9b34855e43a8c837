"""The BM25 lane of a user with posting segments: the segments' path against the postings'
paths, query by query, in this process.

Against a user that ``bench.retrieval_latency --keep`` left (its single layout: one user of
``--scale`` memories). Fresh queries are drawn as that bench draws them (a seed of this run's
own); each query's lane (``bm25_search``, the fused search's depth) is timed once from the
segments and once from the postings (the one statement up to ``SINGLE_STATEMENT_POSTINGS``
postings over its terms, MaxScore term by term past it), which goes first alternating query by
query, and the two rankings are compared: the same documents in the same order, scores within
1e-9. The figures are split by the query's postings, at or under the one statement's bound and
past it. A user without ready segments has them built first, as beat's sync would
(``segments_build``; the time is printed).

    .venv/bin/python -m bench.bm25_lane --user lat-<run>-single-0 [--queries 300]
        [--data-dir DIR] [--database-url URL] [--api-key KEY] [--smoke]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from bench.common import (
    SMOKE_NOTE,
    BenchError,
    api_key_read,
    arguments_parse,
    database_arguments,
    django_setup,
    load_average,
    percentile,
    run_start,
    tenant_from_key,
)
from bench.memories_load import QuerySource, Vocabulary, searched_kind

SMOKE = {"queries": 8, "warmup": 2}
# What each lane of a hybrid search of 10 fetches (as bench.retrieval_latency asks).
LIMIT = 10
PATHS = ("segments", "postings")


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--user", required=True, help="a user bench.retrieval_latency --keep left")
    parser.add_argument("--api-key", default=None, help="default: <data dir>/demo-api-key")
    parser.add_argument("--queries", type=int, default=300, help="measured queries")
    parser.add_argument("--warmup", type=int, default=20, help="unmeasured queries first")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a few queries: checks that the bench runs; figures mean nothing",
    )
    database_arguments(parser)
    arguments = arguments_parse(parser, argv, smoke=SMOKE)
    if arguments.queries < 1:
        parser.error("--queries must be at least 1")
    arguments.data_dir = arguments.data_dir.resolve()
    return arguments


@dataclass
class Figures:
    """Each path's times (ms) by the queries' postings, and the queries ranked differently."""

    times: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    differing: list[str] = field(default_factory=list)
    postings: list[int] = field(default_factory=list)

    def add(self, path: str, bucket: str, value: float) -> None:
        for key in ((path, bucket), (path, "all")):
            self.times.setdefault(key, []).append(value)


@contextmanager
def postings_only() -> Iterator[None]:
    """``bm25_search`` as for a user without segments: it finds no cover to read."""
    from mirix_site.search import segments

    found = segments.covers_in_scope
    segments.covers_in_scope = lambda *args, **kwargs: segments.Covers((), ())
    try:
        yield
    finally:
        segments.covers_in_scope = found


def _same(first: list[tuple[int, float]], second: list[tuple[int, float]]) -> bool:
    return [doc for doc, _ in first] == [doc for doc, _ in second] and all(
        math.isclose(a, b, rel_tol=0, abs_tol=1e-9)
        for (_, a), (_, b) in zip(first, second, strict=True)
    )


def bench(arguments: argparse.Namespace) -> Figures:
    django_setup(arguments)
    from django.db.models import Sum

    from accounts.models import EndUser
    from accounts.tenancy import Scope
    from mirix_site.search import segments
    from mirix_site.search.bm25 import SINGLE_STATEMENT_POSTINGS, bm25_search, query_lexemes
    from mirix_site.search.engine import OVERFETCH
    from mirix_site.search.models import DocumentStats, SegmentCover, TermStats

    api_key = api_key_read(arguments, key_file=arguments.data_dir / "demo-api-key")
    tenant = tenant_from_key(api_key)
    kind = searched_kind()
    end_user = EndUser.objects.filter(
        organization=tenant.organization, user_id=arguments.user
    ).first()
    if end_user is None:
        raise BenchError(f"no user {arguments.user!r} in the key's organization")
    scope = Scope.readable_by(tenant, end_user=end_user)
    owners = DocumentStats.objects.filter(
        end_user=end_user, kind=kind.code, client_id__in=scope.client_ids, doc_count__gt=0
    ).values_list("client_id", "doc_count")
    if not owners:
        raise BenchError(f"user {arguments.user!r} has no {kind.name} documents to search")
    documents = sum(count for _client, count in owners)
    if documents < segments.kept_from():
        raise BenchError(
            f"user {arguments.user!r} has {documents:,} documents: fewer than an owner keeps "
            f"segments with ({segments.kept_from():,})"
        )
    for client_id, count in owners:
        ready = SegmentCover.objects.filter(
            end_user=end_user, kind=kind.code, client_id=client_id, ready=True
        ).exists()
        if not ready:
            began = time.perf_counter()
            segments.segments_build(kind, tenant.organization.pk, client_id, end_user.pk)
            print(
                f"built the segments of {count:,} documents (client {client_id}) in "
                f"{time.perf_counter() - began:.1f} s",
                flush=True,
            )

    if not segments.covers_in_scope(scope, kind, documents=documents).covers:
        raise BenchError(f"user {arguments.user!r}: no ready segments after the build")

    def timed(search: Callable[[], list[tuple[int, float]]]) -> tuple[float, list]:
        began = time.perf_counter()
        found = search()
        return (time.perf_counter() - began) * 1000, found

    def lane(query: str) -> list[tuple[int, float]]:
        return bm25_search(scope=scope, kind=kind, query=query, limit=LIMIT * OVERFETCH)

    def postings_lane(query: str) -> list[tuple[int, float]]:
        with postings_only():
            return lane(query)

    figures = Figures()
    source = QuerySource(Vocabulary.load(), f"bm25-lane:{uuid.uuid4().hex}")
    for query in source.take(arguments.warmup):
        lane(query)
        postings_lane(query)
    for number, query in enumerate(source.take(arguments.queries)):
        total = (
            TermStats.objects.filter(
                end_user=end_user,
                kind=kind.code,
                client_id__in=scope.client_ids,
                lexeme__in=query_lexemes(query),
            ).aggregate(total=Sum("doc_frequency"))["total"]
            or 0
        )
        figures.postings.append(total)
        bucket = "under" if total <= SINGLE_STATEMENT_POSTINGS else "past"
        runs = {"segments": lambda q=query: lane(q), "postings": lambda q=query: postings_lane(q)}
        order = PATHS if number % 2 == 0 else PATHS[::-1]
        found = {}
        for path in order:
            elapsed, found[path] = timed(runs[path])
            figures.add(path, bucket, elapsed)
        if not _same(found["segments"], found["postings"]):
            figures.differing.append(query)
    return figures


def report(figures: Figures) -> None:
    from mirix_site.search.bm25 import SINGLE_STATEMENT_POSTINGS

    postings = sorted(figures.postings)
    print(
        f"postings over a query's terms: p50 {percentile(postings, 0.5):,.0f}, "
        f"p95 {percentile(postings, 0.95):,.0f}, max {postings[-1]:,}"
    )
    labels = {
        "all": "every query",
        "under": f"<= {SINGLE_STATEMENT_POSTINGS:,} postings",
        "past": f"> {SINGLE_STATEMENT_POSTINGS:,} postings",
    }
    for bucket, label in labels.items():
        for path in PATHS:
            values = figures.times.get((path, bucket))
            if not values:
                continue
            print(
                f"{label:22} {path:9} n {len(values):4}  p50 {percentile(values, 0.5):7.2f} ms  "
                f"p95 {percentile(values, 0.95):7.2f} ms  mean {sum(values) / len(values):7.2f} ms"
            )
    print(f"rankings differing: {len(figures.differing)} of {len(figures.postings)}")
    for query in figures.differing[:10]:
        print(f"  {query!r}")


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _arguments(argv)
    run_start("bench.bm25_lane", argv)
    try:
        figures = bench(arguments)
    except BenchError as error:
        print(error, file=sys.stderr)
        return 1
    report(figures)
    print(f"load average at end (1/5/15 min): {load_average()}")
    if arguments.smoke:
        print(SMOKE_NOTE)
    return 1 if figures.differing else 0


if __name__ == "__main__":
    sys.exit(main())
