"""Retrieval latency at scale: hybrid ``GET /memory/search`` over 100,000 memories.

How long a search takes, split into the query's embedding and the search itself, next to exact
scans of the same data in the same run.

Two layouts of the same ``--scale`` memories (episodic, one embedding each):

- ``single``: one end user holds all of them.
- ``spread``: ``--users`` end users (default 1,000) with Zipf-distributed sizes (user k holds
  about scale / (k · H(users)) rows: at 100,000 the largest ~13,400, the median ~27, the
  smallest ~13). Queries are split evenly over size buckets (1-100, 101-1,000, 1,001-5,000 and
  over 5,000 rows: the vector lane scans a user's rows exactly up to 5,000 and walks the HNSW
  index above), each query to a random user of its bucket; figures per bucket and overall.

Data. Memory text is word salad drawn Zipf-like (exponent 1) from the 5,000 most frequent
whole words of the all-MiniLM-L6-v2 tokenizer's vocabulary (listed by corpus frequency), 15-40
words each, so BM25 sees stop words, common terms with long posting lists, and rare ones.
Queries are 3-8 words drawn the same way (redrawn until the server would search one: a topic
word by its reading, ``QuerySource``), all distinct, and drawn afresh each run (seeded by the
run id) so that none of their embeddings is already in the server's Redis cache: ``embed`` is
a real model run. Embeddings (``--embeddings``): ``model`` embeds every text with the local
all-MiniLM-L6-v2 in this process
(the realistic choice: real neighbourhoods for the HNSW graph; ~160 texts/s here with the
server's one torch thread, so ~10 minutes at 100,000, kept in ``<data dir>/bench-cache`` for
the next run);
``synthetic`` draws unit vectors around 128 random centres (seconds even at 1,000,000; the
vector lane does the same work, but the real-model query vectors match nothing in particular,
so only latency means anything). ``auto`` (default): ``model`` up to 200,000 memories.

Loading. The rows go straight into the server's PostgreSQL, into the demo tenant of the data
directory (its key's client), as end users ``lat-<run id>-single-0`` and
``lat-<run id>-spread-<n>``: memories and embeddings through COPY into a staging table and one
``INSERT ... SELECT`` each, whose tables and columns are read from the models (every column the
bench has no value for gets what the model gives a new row: its default, ``now()`` for
``auto_now``, NULL or ''; a required column with none stops the bench), and their BM25 postings
from the staged text by the server's own analysis (``mirix_site.search.index.postings_insert``),
in batches of 2,000; the users' BM25 statistics are counted once at the end
(``statistics_recount``). Every constraint and index of the loaded tables but their primary keys
(the shared HNSW index ``episodicembedding_hnsw`` among them) is dropped for the load and made
again after it, as pg_restore does (``bench.memories_load.indexes_deferred``): each index built
once from the whole table, each foreign key checked in one pass, where row by row the checks at
commit alone took a third of the load, and a bulk HNSW build is several times faster than
inserting into the graph. The tables are vacuumed and analysed (steady state: visibility map set
for BM25's index-only scans), and the server's ``vector_indexes_sync`` gives each user past
5,000 rows their own HNSW index, as beat would (the single layout's one user holds every
vector: the shared graph serves them, ``mirix_site.search.vector_indexes``). The previous
layout's rows are deleted before the next layout is loaded, and every user this run created is
deleted at the end unless ``--keep`` (which also keeps the first layout's rows beside the
second while it is measured; ``--delete-run RUN`` deletes them later). ``--again RUN`` measures
a kept run's layouts once more as they are, nothing loaded or deleted: the same data searched
by another commit's server, or after a change of settings, without the load and builds of a new
run.

Measuring, per layout, one request at a time over one keep-alive connection (latency, not
throughput), after ``--warmup`` (200) unmeasured searches on that connection: the HNSW index was
just built, and its pages reach PostgreSQL's shared buffers only through searches (there is no
pg_prewarm in the embedded server), so the first searches after a build read them from the OS
cache; with 10 warm-up searches the same code measured p50 31 to 65 ms from run to run:

- client: request sent to body read, as the bench sees it;
- embed, search: the server's ``Server-Timing`` (embed = the query's embedding; search = BM25 +
  vector lane + fusion + gate + rows), of ``memory_type=episodic&search_method=hybrid&limit=10``;
- exact vector: the vector lane's own exact path (``vector_search(..., exact=True)``, every
  embedding of the user ranked by cosine distance, 40 nearest as the hybrid lane fetches), with
  the query embedded here by the same model, timed from this process over the same socket;
- exact BM25: Okapi BM25 with the server's statistics and formula, but scoring every posting of
  every query term for the user (no MaxScore pruning), 40 best;
- recall@10: the first 10 of ``search_method=embedding`` (resp. ``bm25``) ``&limit=40`` (the
  hybrid lanes' own fetch) against the first 10 of the exact scans, mean over queries (a found
  row within ``TIE`` of the exact 10th's distance or score counts as one of them).

Goal: search p95 <= 30 ms at 100,000 memories in both layouts.

Run against a live server with the rate limit raised, on a quiet machine. At 100,000 expect
~20 minutes the first time (half of it embedding the corpus) and ~10 after. ``--scale 1000000``
(synthetic vectors; ``--users 10000 --sizes even`` for 10,000 users of 100,
``--exact-queries 30``: an exact scan of a user of 1,000,000 takes seconds) loads ten times as
much per layout; bench/RESULTS.md has where its time goes (loading ~3,000 memories/s here, the
HNSW graphs of 1,000,000 vectors most of the rest); ``--layouts`` runs one layout.

    API_RATE_LIMIT=10000000/min make run
    .venv/bin/python -m bench.retrieval_latency [--scale 100000] [--queries 300] [--users 1000]
        [--layouts single,spread] [--sizes zipf|even] [--embeddings auto|model|synthetic]
        [--exact-queries N] [--keep] [--again RUN]
        [--base-url URL] [--data-dir DIR] [--database-url URL] [--api-key KEY] [--smoke]

The bench sets up Django with ``mirix_site.settings.local`` against ``--database-url`` (default:
the embedded PostgreSQL of ``--data-dir``, itself ``MIRIX_DATA_DIR`` or ``.mirix-data``); give it
the same ``TEXT_SEARCH_CONFIG`` and embedding settings as the server. Called in a process that
has set Django up already (the test suite), it uses that setup and its database.

``--smoke``: 200 memories per layout, 8 users, 8 queries, 2 warm-up searches; the shared HNSW
index stays in place through the load and nothing is vacuumed (the database may be shared, as
the test suite's is); per-user indexes are synced as in a full run.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import math
import random
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import numpy as np

from bench.common import (
    PROGRESS_EVERY_SECONDS,
    RATE_LIMIT_HINT,
    SMOKE_NOTE,
    BenchError,
    KeepAliveClient,
    api_key_read,
    arguments_parse,
    database_arguments,
    django_setup,
    percentile,
    server_arguments,
    tenant_from_key,
)
from bench.memories_load import (
    LOAD_BATCH_ROWS,
    Layout,
    QuerySource,
    Vocabulary,
    beat_builds,
    corpus_texts,
    hnsw_kept,
    indexes_deferred,
    progress_print,
    quoted_column,
    quoted_table,
    rows_load,
    searched_kind,
    synthetic_vectors,
    tables_vacuum,
    users_create,
    users_delete,
)

if TYPE_CHECKING:
    from django.db import models

    from accounts.tenancy import Scope, Tenant
    from mirix_site.providers.embeddings import EmbeddingProvider
    from mirix_site.search.kinds import SearchableKind

# Search p95 goals by layout ([14/18]: a user of 1,000,000 within 30 ms, 10,000 users of 100
# within 20) and what a client should wait at p95.
GOAL_SEARCH_P95_MS = {"single": 30.0, "spread": 20.0}
GOAL_CLIENT_P95_MS = 40.0
LIMIT = 10
# The hybrid search's lanes fetch limit x OVERFETCH (mirix_site.search.engine.OVERFETCH).
LANE_FETCH = 40
MODEL_EMBEDDINGS_MAX_SCALE = 200_000
SMOKE = {"scale": 200, "users": 8, "queries": 8, "warmup": 2}

EMBED_CHUNK_TEXTS = 2048


# --- Embeddings -----------------------------------------------------------------------------------


def model_vectors(texts: list[str], *, embedder: EmbeddingProvider, cache_dir: Path) -> np.ndarray:
    """Every text embedded by the local model, or read back from the cache of an earlier run of
    the same texts."""
    digest = hashlib.sha256(embedder.model_name.encode())
    for text in texts:
        digest.update(text.encode() + b"\n")
    cache = cache_dir / f"retrieval-latency-{digest.hexdigest()[:16]}.npy"
    if cache.exists():
        print(f"embeddings: {len(texts):,} read from {cache}", flush=True)
        return np.load(cache)
    print(f"embeddings: embedding {len(texts):,} texts with {embedder.model_name}", flush=True)
    vectors = np.empty((len(texts), embedder.dimensions), dtype=np.float32)
    began = last_report = time.perf_counter()
    for start in range(0, len(texts), EMBED_CHUNK_TEXTS):
        chunk = texts[start : start + EMBED_CHUNK_TEXTS]
        vectors[start : start + len(chunk)] = np.asarray(embedder.embed(chunk), dtype=np.float32)
        if time.perf_counter() - last_report >= PROGRESS_EVERY_SECONDS:
            progress_print("embedded", start + len(chunk), len(texts), began)
            last_report = time.perf_counter()
    seconds = time.perf_counter() - began
    print(f"embeddings: {len(texts):,} in {seconds:.0f} s ({len(texts) / seconds:,.0f}/s)")
    cache_dir.mkdir(parents=True, exist_ok=True)
    np.save(cache, vectors)
    return vectors


# --- The database -------------------------------------------------------------------------------


def zipf_sizes(total: int, users: int) -> list[int]:
    """``users`` sizes summing to ``total``, user k's about total / (k · H(users)), at least 1."""
    harmonic = sum(1 / rank for rank in range(1, users + 1))
    shares = [total / (rank * harmonic) for rank in range(1, users + 1)]
    sizes = [max(1, math.floor(share)) for share in shares]
    by_remainder = sorted(range(users), key=lambda index: shares[index] - sizes[index])
    while sum(sizes) < total:
        sizes[by_remainder.pop()] += 1
    while sum(sizes) > total:  # the minimum of 1 overshot: take it back from the largest
        sizes[sizes.index(max(sizes))] -= 1
    return sizes


def even_sizes(total: int, users: int) -> list[int]:
    """``total`` rows over ``users`` users as evenly as they go (10,000 users of 100)."""
    return [total // users + (index < total % users) for index in range(users)]


def gate_state(kind: SearchableKind, model: str) -> str:
    from mirix_site.search.gate import gate_thresholds

    thresholds = gate_thresholds(model=model, kinds=[kind])[kind.name]
    if thresholds is None:
        return f"off (no calibration for {model}: no distance look-ups for BM25-only hits)"
    return (
        f"calibrated (min {thresholds.min_similarity:.3f}, "
        f"strong {thresholds.strong_similarity:.3f})"
    )


# --- Talking to the server -----------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    payload: Any
    server_timing: dict[str, float]
    client_ms: float


def server_timing_parse(header: str) -> dict[str, float]:
    """``embed;dur=1.20, search;dur=3.40`` -> {"embed": 1.2, "search": 3.4}"""
    timings: dict[str, float] = {}
    for metric in header.split(","):
        name, _, parameters = metric.strip().partition(";")
        for parameter in parameters.split(";"):
            key, _, value = parameter.strip().partition("=")
            if key == "dur":
                timings[name] = float(value)
    return timings


def search(
    client: KeepAliveClient,
    user_id: str,
    query: str,
    *,
    method: str,
    limit: int,
    temporal: bool = True,
) -> Answer:
    """One search over the client's connection, timed from request sent to body read (a
    reconnect after gunicorn dropped the idle connection may reach a cold worker: counted in
    ``client.reconnects``, and reported). ``temporal``: as the API's (false: a time the words
    name is only words)."""
    path = "/memory/search?" + urlencode(
        {
            "user_id": user_id,
            "query": query,
            "memory_type": "episodic",
            "search_method": method,
            "limit": limit,
            "temporal": "true" if temporal else "false",
        }
    )
    reply = client.exchange("GET", path)
    timing = server_timing_parse(reply.headers.get("Server-Timing") or "")
    return Answer(reply.status, reply.payload(), timing, reply.elapsed_ms)


def _checked(answer: Answer, what: str) -> Answer:
    if answer.status == 429:
        raise BenchError(RATE_LIMIT_HINT)
    if answer.status != 200:
        raise BenchError(f"{what}: {answer.status} {answer.payload}")
    return answer


def probe(client: KeepAliveClient, user_id: str) -> None:
    """Before the long load: a wrong key, a server on another database or a low rate limit stop
    the run here, with a clear message."""
    answer = search(client, user_id, "probe", method="bm25", limit=1)
    if answer.status == 401:
        raise BenchError(f"401: the server refused the API key ({answer.payload})")
    if answer.status == 404:
        raise BenchError(
            f"404 for {user_id}, just created in the bench's database: the server at the base URL "
            "does not use that database (check --base-url against --data-dir / --database-url)"
        )
    _checked(answer, "probe search")
    if "search" not in answer.server_timing:
        raise BenchError("the search answered without a Server-Timing header: an older server?")


# --- Measuring ------------------------------------------------------------------------------------


@dataclass
class Measurement:
    """One query: who it went to, the server's figures, the baselines', and the lanes' recall."""

    user_index: int
    query: str
    client_ms: float = 0.0
    embed_ms: float = 0.0
    search_ms: float = 0.0
    bm25_ms: float = 0.0  # the server's lanes, inside search (they overlap)
    vector_ms: float = 0.0
    exact_vector_ms: float | None = None  # None: not among the checked queries
    exact_bm25_ms: float | None = None
    vector_recall: float | None = None
    bm25_recall: float | None = None


def _ids(answer: Answer, count: int) -> list[int]:
    return [int(result["id"]) for result in answer.payload["results"][:count]]


# A found row within this of the exact LIMIT-th row's distance or score is as good as it: which of
# rows that near a scan returns is arbitrary, and the server's query embedding (perhaps from its
# cache) may differ from the bench's in the last bits.
TIE = 1e-6


def _recall(
    found: list[int], exact: list[tuple[int, float]], *, higher_first: bool
) -> float | None:
    """The share of the exact top LIMIT (``exact``: rows ranked with their distance or score)
    that the lane found, a found row tied with the LIMIT-th counting as one of them."""
    top = exact[:LIMIT]
    if not top:
        return None
    edge, value = top[-1][1], dict(exact)
    hits = sum(
        row in value and (value[row] >= edge - TIE if higher_first else value[row] <= edge + TIE)
        for row in found
    )
    return min(hits, len(top)) / len(top)


def exact_bm25(
    scope: Scope, kind: SearchableKind, query: str, limit: int
) -> list[tuple[int, float]]:
    """Okapi BM25 as the server scores it (same statistics, same formula), reading every
    posting of every query term in scope: what MaxScore pruning saves."""
    from django.db import connection

    from mirix_site.search.bm25 import idf, query_lexemes, term_weight
    from mirix_site.search.models import DocumentStats, Posting, TermStats

    lexemes = query_lexemes(query)
    if not lexemes:
        return []
    where, parameters = scope.where()
    parameters |= {"kind": kind.code, "lexemes": lexemes}

    def of_kind(model: type[models.Model]) -> str:
        return f"{where} AND {quoted_column(model, 'kind')} = %(kind)s"

    term_lexeme, posting_lexeme = (
        quoted_column(TermStats, "lexeme"),
        quoted_column(Posting, "lexeme"),
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT coalesce(sum({quoted_column(DocumentStats, 'doc_count')}), 0), "  # noqa: S608
            f"coalesce(sum({quoted_column(DocumentStats, 'total_length')}), 0) "
            f"FROM {quoted_table(DocumentStats)} WHERE {of_kind(DocumentStats)}",
            parameters,
        )
        documents, total_length = cursor.fetchone()
        cursor.execute(
            f"SELECT {term_lexeme}, sum({quoted_column(TermStats, 'doc_frequency')}) "  # noqa: S608
            f"FROM {quoted_table(TermStats)} WHERE {of_kind(TermStats)} "
            f"AND {term_lexeme} = ANY(%(lexemes)s::text[]) GROUP BY {term_lexeme}",
            parameters,
        )
        frequencies = dict(cursor.fetchall())
        cursor.execute(
            f"SELECT {posting_lexeme}, {quoted_column(Posting, 'document_id')}, "  # noqa: S608
            f"{quoted_column(Posting, 'tf')}, {quoted_column(Posting, 'doc_length')} "
            f"FROM {quoted_table(Posting)} WHERE {of_kind(Posting)} "
            f"AND {posting_lexeme} = ANY(%(lexemes)s::text[])",
            parameters,
        )
        postings = cursor.fetchall()
    if not documents:
        return []
    average = float(total_length) / documents
    weights = {lexeme: idf(documents, int(df)) for lexeme, df in frequencies.items() if df > 0}
    scores: dict[int, float] = defaultdict(float)
    for lexeme, document_id, tf, doc_length in postings:
        if lexeme in weights:
            scores[document_id] += weights[lexeme] * term_weight(tf, doc_length, average)
    return heapq.nlargest(limit, scores.items(), key=lambda item: (item[1], item[0]))


def measure(
    *,
    client: KeepAliveClient,
    layout: Layout,
    plan: list[Measurement],
    warmup: list[Measurement],
    tenant: Tenant,
    kind: SearchableKind,
    embedder: EmbeddingProvider,
    exact_queries: int = 0,
) -> None:
    """Fills in ``plan``: the hybrid pass, the lane checks, then the exact scans (of
    ``exact_queries`` of them, ``checked_sample``)."""
    from accounts.tenancy import Scope
    from mirix_site.search.vectors import vector_search

    for item in warmup:
        _checked(
            search(
                client,
                layout.user_ids[item.user_index],
                item.query,
                method="hybrid",
                limit=LIMIT,
            ),
            "warm-up search",
        )
    began = time.perf_counter()
    for item in plan:
        answer = _checked(
            search(
                client,
                layout.user_ids[item.user_index],
                item.query,
                method="hybrid",
                limit=LIMIT,
            ),
            "hybrid search",
        )
        item.client_ms = answer.client_ms
        item.embed_ms = answer.server_timing.get("embed", math.nan)
        item.search_ms = answer.server_timing.get("search", math.nan)
        item.bm25_ms = answer.server_timing.get("bm25", math.nan)
        item.vector_ms = answer.server_timing.get("vector", math.nan)
    print(f"  {len(plan)} hybrid searches in {time.perf_counter() - began:.1f} s", flush=True)

    began = time.perf_counter()
    checked = checked_sample(plan, exact_queries)
    lanes: list[tuple[list[int], list[int]]] = []
    for item in checked:
        user_id = layout.user_ids[item.user_index]
        # Each lane alone, as the exact scans rank: a query whose words name a time ("the of
        # april", about 1 in 200 of the vocabulary's) would otherwise be answered with the
        # time lane's rows fused in.
        vector_answer, bm25_answer = (
            search(client, user_id, item.query, method=method, limit=LANE_FETCH, temporal=False)
            for method in ("embedding", "bm25")
        )
        lanes.append(
            (
                _ids(_checked(vector_answer, "embedding search"), LIMIT),
                _ids(_checked(bm25_answer, "bm25 search"), LIMIT),
            )
        )

    client_ids = tuple(sorted(tenant.readable_client_ids))
    for item, (vector_found, bm25_found) in zip(checked, lanes, strict=True):
        scope = Scope(
            organization_id=tenant.organization.pk,
            client_ids=client_ids,
            end_user_id=layout.pks[item.user_index],
        )
        # One text per call, as the server embeds a query.
        vector = embedder.embed([embedder.chunk(item.query)[0]])[0]
        started = time.perf_counter()
        nearest = vector_search(
            scope=scope,
            kind=kind,
            vector=vector,
            model=embedder.model_name,
            limit=LANE_FETCH,
            exact=True,
        )
        item.exact_vector_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        best = exact_bm25(scope, kind, item.query, LANE_FETCH)
        item.exact_bm25_ms = (time.perf_counter() - started) * 1000
        item.vector_recall = _recall(vector_found, nearest, higher_first=False)
        item.bm25_recall = _recall(bm25_found, best, higher_first=True)
    print(
        f"  lane checks and exact scans of {len(checked)} queries in "
        f"{time.perf_counter() - began:.1f} s"
        + (f" ({client.reconnects} reconnects)" if client.reconnects else ""),
        flush=True,
    )


def checked_sample(plan: list[Measurement], count: int) -> list[Measurement]:
    """``count`` of the plan's queries at even steps, so each size bucket gets its share
    (all of them for 0 or a count that covers them)."""
    if not count or count >= len(plan):
        return plan
    step = len(plan) / count
    return [plan[int(number * step)] for number in range(count)]


def size_buckets(exact_max: int) -> list[tuple[str, int, float]]:
    return [
        ("1-100", 1, 100),
        ("101-1,000", 101, 1000),
        (f"1,001-{exact_max:,}", 1001, exact_max),
        (f">{exact_max:,}", exact_max + 1, math.inf),
    ]


def query_plan(
    layout: Layout, queries: list[str], rng: random.Random, exact_max: int
) -> list[tuple[str, list[Measurement]]]:
    """(bucket label, its queries): the queries split evenly over the non-empty size buckets,
    each to a random user of its bucket. One bucket of everyone for a single-user layout."""
    if len(layout.user_ids) == 1:
        return [("", [Measurement(0, query) for query in queries])]
    buckets = []
    for label, low, high in size_buckets(exact_max):
        members = [index for index, size in enumerate(layout.sizes) if low <= size <= high]
        if members:
            buckets.append((label, members))
    plan: list[tuple[str, list[Measurement]]] = []
    taken = 0
    for number, (label, members) in enumerate(buckets):
        count = len(queries) // len(buckets) + (number < len(queries) % len(buckets))
        plan.append(
            (
                label,
                [
                    Measurement(rng.choice(members), query)
                    for query in queries[taken : taken + count]
                ],
            )
        )
        taken += count
    return plan


# --- Reporting -----------------------------------------------------------------------------------


@dataclass
class ReportRow:
    label: str
    users: int
    rows: int
    items: list[Measurement]
    layout: str
    whole_layout: bool = True  # False: one size bucket of the spread layout

    @property
    def goal_ms(self) -> float:
        return GOAL_SEARCH_P95_MS[self.layout]


def search_p95(row: ReportRow) -> float:
    return percentile([item.search_ms for item in row.items], 0.95)


def _verdict(row: ReportRow) -> str:
    return "met" if search_p95(row) <= row.goal_ms else "NOT met"


def _pair(values: list[float]) -> str:
    return f"{percentile(values, 0.5):7.1f} /{percentile(values, 0.95):7.1f}"


def _mean(values: list[float | None]) -> str:
    known = [value for value in values if value is not None]
    return f"{sum(known) / len(known):5.3f}" if known else "  -  "


# The timed columns of the two tables: (heading, Measurement attribute).
TIMES = [
    ("client", "client_ms"),
    ("embed", "embed_ms"),
    ("search", "search_ms"),
    ("exact vector", "exact_vector_ms"),
    ("exact BM25", "exact_bm25_ms"),
]
LANE_TIMES = [("search", "search_ms"), ("bm25", "bm25_ms"), ("vector", "vector_ms")]


def _headings(columns: list[tuple[str, str]]) -> tuple[str, str]:
    names = "   ".join(f"{name:>15}" for name, _ in columns)
    return names, "   ".join(f"{'p50 /    p95':>15}" for _ in columns)


def _pairs(items: list[Measurement], columns: list[tuple[str, str]]) -> str:
    pairs = []
    for _, attribute in columns:
        values = [getattr(item, attribute) for item in items]
        known = [value for value in values if value is not None]
        pairs.append(_pair(known) if known else f"{'-':>15}")
    return "   ".join(pairs)


_TIME_NAMES, _TIME_P50S = _headings(TIMES)
HEADER = (
    f"{'layout':<30} {'users':>6} {'rows':>9} {'queries':>7}   {_TIME_NAMES}   "
    f"{'recall@10':>11}   goal"
)
SUBHEADER = (
    f"{'':<30} {'':>6} {'':>9} {'':>7}   {_TIME_P50S}   {'vec / bm25':>11}   search p95 goal"
)
_LANE_NAMES, _LANE_P50S = _headings(LANE_TIMES)
LANES_HEADER = (
    "inside search, the server's lanes (Server-Timing; they run at once)\n"
    f"{'layout':<30} {_LANE_NAMES}\n{'':<30} {_LANE_P50S}"
)


def report_line(row: ReportRow) -> str:
    items = row.items
    return (
        f"{row.label:<30} {row.users:>6} {row.rows:>9,} {len(items):>7}   "
        f"{_pairs(items, TIMES)}   "
        f"{_mean([item.vector_recall for item in items])} / "
        f"{_mean([item.bm25_recall for item in items])}   {_verdict(row)}"
    )


def lanes_line(row: ReportRow) -> str:
    return f"{row.label:<30} {_pairs(row.items, LANE_TIMES)}"


def layout_rows(
    layout: Layout, plan: list[tuple[str, list[Measurement]]], exact_max: int
) -> list[ReportRow]:
    everyone = [item for _label, items in plan for item in items]
    path = "HNSW" if max(layout.sizes) > exact_max else "exact scan"
    if len(layout.user_ids) == 1:
        return [ReportRow(f"{layout.name} ({path})", 1, layout.rows, everyone, layout.name)]
    rows = [ReportRow(layout.name, len(layout.user_ids), layout.rows, everyone, layout.name)]
    buckets = {label: (low, high) for label, low, high in size_buckets(exact_max)}
    for label, items in plan:
        low, high = buckets[label]
        sizes = [size for size in layout.sizes if low <= size <= high]
        path = "HNSW" if low > exact_max else "exact"
        rows.append(
            ReportRow(
                f"  users of {label} ({path})", len(sizes), sum(sizes), items, layout.name, False
            )
        )
    return rows


# --- The run ------------------------------------------------------------------------------------


@dataclass
class Context:
    """What every layout needs: the server, the tenant, the corpus, the query source."""

    arguments: argparse.Namespace
    api_key: str
    run: str
    tenant: Tenant
    kind: SearchableKind
    embedder: EmbeddingProvider
    texts: list[str]
    queries: QuerySource
    vectors: np.ndarray | None = None
    created: list[Layout] = field(default_factory=list)


def layouts_make(context: Context) -> list[Layout]:
    arguments, run = context.arguments, context.run
    layouts = []
    for name in arguments.layouts:
        if name == "single":
            layouts.append(Layout("single", [f"lat-{run}-single-0"], [arguments.scale]))
        else:
            sizes = (zipf_sizes if arguments.sizes == "zipf" else even_sizes)(
                arguments.scale, arguments.users
            )
            user_ids = [f"lat-{run}-spread-{index}" for index in range(arguments.users)]
            layouts.append(Layout("spread", user_ids, sizes))
    return layouts


def kept_layouts(tenant: Tenant, kind: SearchableKind, run: str, names: list[str]) -> list[Layout]:
    """The layouts of ``names`` a ``--keep`` run left, their users in order and each one's
    memories counted as they are now."""
    from django.db.models import Count

    from accounts.models import EndUser

    layouts = []
    for name in names:
        prefix = f"lat-{run}-{name}-"
        users = sorted(
            EndUser.objects.filter(
                organization=tenant.organization, user_id__startswith=prefix
            ).values_list("user_id", "pk"),
            key=lambda user: int(user[0].removeprefix(prefix)),
        )
        if not users:
            continue
        counts = dict(
            kind.model.objects.filter(end_user_id__in=[pk for _user_id, pk in users])
            .values_list("end_user_id")
            .annotate(rows=Count("pk"))
        )
        layouts.append(
            Layout(
                name,
                [user_id for user_id, _pk in users],
                [counts.get(pk, 0) for _user_id, pk in users],
                pks=[pk for _user_id, pk in users],
            )
        )
    return layouts


def corpus_vectors(context: Context) -> np.ndarray:
    arguments = context.arguments
    if context.vectors is None:
        mode = arguments.embeddings
        if mode == "auto":
            mode = "model" if arguments.scale <= MODEL_EMBEDDINGS_MAX_SCALE else "synthetic"
        if mode == "model":
            context.vectors = model_vectors(
                context.texts,
                embedder=context.embedder,
                cache_dir=arguments.data_dir / "bench-cache",
            )
        else:
            began = time.perf_counter()
            context.vectors = synthetic_vectors(
                len(context.texts), dimensions=context.embedder.dimensions, seed=arguments.seed
            )
            print(
                f"embeddings: {len(context.texts):,} synthetic (clustered) vectors in "
                f"{time.perf_counter() - began:.0f} s",
                flush=True,
            )
    return context.vectors


def layout_run(
    context: Context, layout: Layout, previous: Layout | None, rng: random.Random
) -> list[ReportRow]:
    from mirix_site.search.vectors import EXACT_SCAN_MAX_ROWS

    arguments, kind = context.arguments, context.kind
    print(
        f"\n[{layout.name}] {layout.rows:,} memories over {len(layout.user_ids):,} users "
        f"(largest {max(layout.sizes):,}, smallest {min(layout.sizes):,})",
        flush=True,
    )
    plan = query_plan(layout, context.queries.take(arguments.queries), rng, EXACT_SCAN_MAX_ROWS)
    warmup = [
        Measurement(rng.randrange(len(layout.user_ids)), query)
        for query in context.queries.take(arguments.warmup)
    ]
    if not arguments.again:
        users_create(context.tenant, layout)
        context.created.append(layout)
    client = KeepAliveClient(arguments.base_url, context.api_key, timeout=60)
    try:
        probe(client, layout.user_ids[0])
        if not arguments.again:
            layout_load(context, layout, previous)
        everyone = [item for _label, items in plan for item in items]
        client.close()  # a fresh connection after the load's long pause, warmed up below
        measure(
            client=client,
            layout=layout,
            plan=everyone,
            warmup=warmup,
            tenant=context.tenant,
            kind=kind,
            embedder=context.embedder,
            exact_queries=arguments.exact_queries,
        )
    finally:
        client.close()
    return layout_rows(layout, plan, EXACT_SCAN_MAX_ROWS)


def layout_load(context: Context, layout: Layout, previous: Layout | None) -> None:
    """The layout's rows loaded (the previous layout's deleted first unless kept), then the
    indexes beat would build."""
    arguments, kind = context.arguments, context.kind
    vectors = corpus_vectors(context)
    with hnsw_kept(kind) if arguments.smoke else indexes_deferred(kind):
        if previous is not None and not arguments.keep:
            began = time.perf_counter()
            users_delete(kind, previous.pks)
            context.created.remove(previous)
            print(f"  deleted the {previous.name} layout in {time.perf_counter() - began:.0f} s")
        rows_load(
            tenant=context.tenant,
            kind=kind,
            layout=layout,
            texts=context.texts,
            vectors=vectors,
            model_name=context.embedder.model_name,
        )
        if not arguments.smoke:
            tables_vacuum(kind)
    beat_builds()


def run_delete(kind: SearchableKind, pks: Sequence[int], run: str, *, smoke: bool) -> None:
    """Delete the bench's users (and their rows). Many vectors go without the HNSW index, which
    is then rebuilt over what is left: cheaper than vacuum repairing the graph around each (not
    in a smoke run, which leaves the index alone)."""
    began = time.perf_counter()
    vectors = kind.embedding_model.objects.filter(end_user_id__in=pks).count()
    if vectors > LOAD_BATCH_ROWS and not smoke:
        with indexes_deferred(kind):
            users_delete(kind, pks)
        tables_vacuum(kind)
    else:
        users_delete(kind, pks)
    beat_builds()
    print(f"deleted {len(pks):,} users lat-{run}-* in {time.perf_counter() - began:.0f} s")


def cleanup(context: Context) -> None:
    if not context.created:
        return
    users = [pk for layout in context.created for pk in layout.pks]
    if context.arguments.keep:
        print(
            f"\nkept {len(users):,} users lat-{context.run}-* and their memories (--keep); "
            f"delete them with --delete-run {context.run}"
        )
        return
    run_delete(context.kind, users, context.run, smoke=context.arguments.smoke)
    context.created.clear()


def kept_delete(tenant: Tenant, kind: SearchableKind, run: str) -> None:
    from accounts.models import EndUser

    pks = list(
        EndUser.objects.filter(
            organization=tenant.organization, user_id__startswith=f"lat-{run}-"
        ).values_list("pk", flat=True)
    )
    if pks:
        run_delete(kind, pks, run, smoke=False)
    else:
        print(f"no users lat-{run}-* in organization {tenant.organization.pk}")


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    server_arguments(parser, key_help="default: <data dir>/demo-api-key")
    database_arguments(parser, also="; the embedding cache")
    parser.add_argument("--scale", type=int, default=100_000, help="memories per layout")
    parser.add_argument("--users", type=int, default=1000, help="users of the spread layout")
    parser.add_argument(
        "--sizes",
        choices=["zipf", "even"],
        default="zipf",
        help="the spread layout's users' sizes: Zipf-distributed, or all alike",
    )
    parser.add_argument(
        "--exact-queries",
        type=int,
        default=0,
        help="check the lanes against exact scans for this many of each layout's queries, "
        "spread over its buckets (0: all); an exact scan of 1,000,000 rows takes seconds",
    )
    parser.add_argument("--queries", type=int, default=300, help="measured queries per layout")
    parser.add_argument(
        "--warmup", type=int, default=200, help="unmeasured searches first, per layout"
    )
    parser.add_argument(
        "--layouts",
        type=lambda value: [name.strip() for name in value.split(",") if name.strip()],
        default=["single", "spread"],
        help="comma-separated: single, spread",
    )
    parser.add_argument(
        "--embeddings",
        choices=["auto", "model", "synthetic"],
        default="auto",
        help="model: the local model embeds the corpus (cached); synthetic: clustered random "
        f"unit vectors; auto: model up to {MODEL_EMBEDDINGS_MAX_SCALE:,} memories",
    )
    parser.add_argument("--seed", type=int, default=1, help="of the corpus (queries: the run id)")
    parser.add_argument("--keep", action="store_true", help="keep the bench's users and rows")
    parser.add_argument(
        "--delete-run", metavar="RUN", help="only delete the users a --keep run left, and exit"
    )
    parser.add_argument(
        "--again",
        metavar="RUN",
        help="measure the layouts a --keep run left as they are (nothing loaded or deleted)",
    )
    arguments = arguments_parse(parser, argv, smoke=SMOKE)
    if not arguments.layouts or set(arguments.layouts) - {"single", "spread"}:
        parser.error("--layouts takes single and/or spread")
    if arguments.scale < arguments.users or arguments.users < 1 or arguments.queries < 4:
        parser.error("need 1 <= --users <= --scale and --queries >= 4")
    arguments.data_dir = arguments.data_dir.resolve()
    return arguments


def bench(arguments: argparse.Namespace) -> list[ReportRow]:
    """Both layouts, loaded, measured and cleaned up; raises BenchError with what went wrong."""
    api_key = api_key_read(arguments, key_file=arguments.data_dir / "demo-api-key")
    database = django_setup(arguments)
    from mirix_site.providers.embeddings import LOCAL_MODEL_NAME, embedding_provider_from_settings

    embedder = embedding_provider_from_settings()
    if embedder.model_name != LOCAL_MODEL_NAME:
        raise BenchError(f"the bench needs the local {LOCAL_MODEL_NAME} embedder")
    tenant = tenant_from_key(api_key)
    kind = searched_kind()
    if arguments.delete_run:
        kept_delete(tenant, kind, arguments.delete_run)
        return []
    layouts: list[Layout] | None = None
    if arguments.again:
        layouts = kept_layouts(tenant, kind, arguments.again, arguments.layouts)
        if not layouts:
            raise BenchError(f"no users lat-{arguments.again}-* of layouts {arguments.layouts}")
        arguments.scale = max(layout.rows for layout in layouts)
        arguments.layouts = [layout.name for layout in layouts]
    run = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    vocabulary = Vocabulary.load()
    context = Context(
        arguments=arguments,
        api_key=api_key,
        run=run,
        tenant=tenant,
        kind=kind,
        embedder=embedder,
        texts=(
            []
            if arguments.again
            else corpus_texts(vocabulary, scale=arguments.scale, seed=arguments.seed)
        ),
        queries=QuerySource(vocabulary, f"{arguments.seed}:{run}"),
    )
    print(
        f"run {run}: {arguments.scale:,} memories, layouts {', '.join(arguments.layouts)}, "
        f"{arguments.queries} queries each"
        + (f" (kept run {arguments.again}, not loaded)" if arguments.again else "")
        + f", server {arguments.base_url}, database "
        f"{database}, organization {tenant.organization.pk}\n"
        f"similarity gate: {gate_state(kind, embedder.model_name)}",
        flush=True,
    )
    rng = random.Random(f"{arguments.seed}:{run}:users")
    began = time.perf_counter()
    rows: list[ReportRow] = []
    previous: Layout | None = None
    try:
        for layout in layouts if layouts is not None else layouts_make(context):
            measured = layout_run(context, layout, previous, rng)
            # Printed as each layout ends: a run stopped during the next keeps these figures.
            print(f"\n[{layout.name}] done {time.perf_counter() - began:.0f} s into the run")
            report_print(measured, scale=arguments.scale, smoke=arguments.smoke)
            rows.extend(measured)
            previous = layout
    except OSError as error:
        raise BenchError(f"{arguments.base_url}: {error} (is the server running?)") from error
    finally:
        cleanup(context)
    return rows


def report_print(rows: list[ReportRow], *, scale: int, smoke: bool) -> None:
    """The tables of these rows, with the goals' verdicts."""
    print(f"all times in ms\n{HEADER}\n{SUBHEADER}")
    for row in rows:
        print(report_line(row))
    print(
        "client: as the bench saw it; embed, search: the server's Server-Timing; exact "
        "vector, exact BM25: the lanes' exact scans of the same user, timed here; recall@10: "
        "the server's lanes against those scans"
    )
    print(f"\n{LANES_HEADER}")
    for row in rows:
        print(lanes_line(row))
    whole = [row for row in rows if row.whole_layout]
    print(
        f"goal, search p95 at {scale:,} memories: "
        + "; ".join(
            f"{row.label} {search_p95(row):.1f} ms (<= {row.goal_ms:.0f}) {_verdict(row)}"
            for row in whole
        )
    )
    print(
        f"client p95 (goal <= {GOAL_CLIENT_P95_MS:.0f} ms): "
        + "; ".join(
            f"{row.label} {percentile([item.client_ms for item in row.items], 0.95):.1f} ms"
            for row in whole
        ),
        flush=True,
    )
    if smoke:
        print(SMOKE_NOTE)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _arguments(argv)
    began = time.perf_counter()
    try:
        rows = bench(arguments)
    except BenchError as error:
        print(error, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted (the bench's users were deleted)", file=sys.stderr)
        return 130
    if rows:
        print(f"\nall layouts; {time.perf_counter() - began:.0f} s in all")
        report_print(rows, scale=arguments.scale, smoke=arguments.smoke)
    return 0


if __name__ == "__main__":
    sys.exit(main())
