"""One search over one or more searchable kinds: lanes, fusion, gate, rows. Callers go through
``mirix_site.search.services.retrieval_search``, which also picks the embedding model and writes
the retrieval log."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, partial
from typing import Any, TypeVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, models
from django.db.models import Q

from accounts.models import EndUser
from accounts.tenancy import Scope
from mirix_site.common.rows import instance_build, model_columns
from mirix_site.providers.embeddings import EmbeddingProvider
from mirix_site.search.bm25 import bm25_search, query_lexemes
from mirix_site.search.fusion import Candidate, Thresholds, gate_apply, lanes_fuse
from mirix_site.search.gate import gate_thresholds
from mirix_site.search.kinds import Hit, SearchableKind
from mirix_site.search.lanes import Lane
from mirix_site.search.query_vectors import QueryVector, query_vector_lane
from mirix_site.search.vectors import distances_of, vector_search

T = TypeVar("T")

METHODS = ("bm25", "embedding", "hybrid")
# Each lane fetches this many times the results asked for, so fusion has room to reorder.
OVERFETCH = 4


@dataclass(frozen=True)
class SearchRequest:
    """What to search: which kinds, for what, how (whose rows is the search's ``Scope``)."""

    kinds: tuple[SearchableKind, ...]
    query: str
    method: str = "hybrid"
    limit: int = 10  # per kind
    filter_tags: dict[str, Any] = field(default_factory=dict)
    start: datetime | None = None  # kinds with a time field only: time >= start
    end: datetime | None = None  # kinds with a time field only: time <= end
    # The time the query's words name ("last month": memory.query.temporal), as (start, end):
    # favoured, never filtered on. The rows of a kind with a time field dated in it make one
    # more lane of the fusion (fusion.py). What is said about an event is often said on another
    # day ("the museums I visited in February", told on 3 March), and a filter hid those
    # answers on data the temporal reading was not written from (bench/RESULTS.md).
    spoken_range: tuple[datetime, datetime] | None = None
    similarity_threshold: float | None = None  # cosine distance; the vector lane only
    search_field: str | None = None  # the keyword lane only
    # The rows searched, instead of the kind's current ones (an experience recall's outcome
    # and context, or superseded rows asked for): the lanes search these alone.
    rows: Q | None = None
    # The moment searched as of: a kind whose rows hold for a time (``valid_at``) searches
    # those valid then, superseded or not, instead of its current ones (``kind_rows``).
    as_of: datetime | None = None
    # The fields the caller reads of each row found (None: all); the rest stay unread (a
    # deferred field is read from the database if touched): recommend reads four of each row.
    fields: tuple[str, ...] | None = None


@dataclass
class SearchOutcome:
    hits: list[Hit]
    embedding_model: str | None
    # Per kind searched: its gate's thresholds (None: the gate was off).
    gate_thresholds: dict[str, Thresholds | None] = field(default_factory=dict)
    gate_counts: dict[str, int] = field(default_factory=dict)
    embed_ms: float = 0.0  # the query's embedding (its cache read when cached; 0: not needed)
    embed_cached: bool = False  # the query's embedding was read from the cache
    # Lanes, fusion, gate and rows: the search's wall time less its wait for the embedding
    # (the embedding runs beside the first BM25 lane, or before the search began).
    search_ms: float = 0.0
    # Each lane's own time, summed over the kinds searched; they overlap in a hybrid search.
    lane_ms: dict[str, float] = field(default_factory=dict)
    wall_ms: float = 0.0  # the search's wall time, its wait for the embedding included


def kind_rows(kind: SearchableKind, request: SearchRequest) -> Q | None:
    """The rows of the kind a request searches: those it names, else those valid at its
    ``as_of`` (a kind with a validity), else None: the kind's current ones."""
    if request.rows is not None:
        return request.rows
    if request.as_of is not None and kind.valid_at is not None:
        return kind.valid_at(request.as_of)
    return None


def _in_scope(kind: SearchableKind, scope: Scope, rows: Q | None) -> tuple[str, dict[str, Any]]:
    """SQL for a kind's rows (aliased ``m``) that the scope may read and that are current (or
    the ``rows`` a search names). SQL because every search reads its rows by it, and building
    the same query through the ORM took three times as long as running it."""
    where, params = scope.where("m.")
    current, current_params = (
        kind.current_where("m.") if rows is None else kind.rows_where(rows, "m.")
    )
    return f"{where} AND {current}", params | current_params


def _ids_where(
    kind: SearchableKind,
    scope: Scope,
    *,
    rows: Q | None,
    filter_tags: dict[str, Any],
    start: datetime | None,
    end: datetime | None,
) -> set[int]:
    """The ids of the kind's rows in scope (current, or ``rows``) whose tags contain
    ``filter_tags`` and whose time is within ``start`` and ``end`` (each None: unbounded). A
    kind with no tags matches no tag filter."""
    if filter_tags and kind.tags_field is None:
        return set()
    where, params = _in_scope(kind, scope, rows)
    if filter_tags:
        where += f" AND m.{kind.column(kind.tags_field)} @> %(filter_tags)s::jsonb"
        params["filter_tags"] = json.dumps(kind.tags_sought(filter_tags))
    if start or end:
        time_column = kind.column(kind.time_field)
        if start:
            where += f" AND m.{time_column} >= %(start)s"
            params["start"] = start
        if end:
            where += f" AND m.{time_column} <= %(end)s"
            params["end"] = end
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT m.id FROM {kind.table} m WHERE {where}", params)  # noqa: S608
        return {row[0] for row in cursor.fetchall()}


def _allowed_ids(kind: SearchableKind, request: SearchRequest, scope: Scope) -> set[int] | None:
    """The ids the filters allow, or None when nothing is filtered. A kind with no time field
    is not filtered by dates."""
    dated = kind.time_field is not None and (request.start or request.end)
    rows = kind_rows(kind, request)
    # An empty ``rows`` (every row, superseded too) restricts nothing.
    if not request.filter_tags and not dated and not rows:
        return None
    return _ids_where(
        kind,
        scope,
        rows=rows,
        filter_tags=request.filter_tags,
        start=request.start if dated else None,
        end=request.end if dated else None,
    )


def _spoken_ids(kind: SearchableKind, request: SearchRequest, scope: Scope) -> set[int] | None:
    """The ids the filters allow that are dated in the time the query's words name (the time
    lane's rows), or None when they name none or the kind has no time of its own."""
    if request.spoken_range is None or kind.time_field is None:
        return None
    start, end = request.spoken_range
    if request.start is not None:
        start = max(start, request.start)
    if request.end is not None:
        end = min(end, request.end)
    if start > end:
        return set()
    return _ids_where(
        kind,
        scope,
        rows=kind_rows(kind, request),
        filter_tags=request.filter_tags,
        start=start,
        end=end,
    )


# What every row found carries, whatever the caller reads: its owner.
OWNER_FIELDS = ("organization", "client", "end_user")


def _rows_by_id(
    kind: SearchableKind,
    scope: Scope,
    ids: list[int],
    rows: Q | None,
    fields: tuple[str, ...] | None,
) -> dict[int, models.Model]:
    """These rows, those the scope may read (current, or ``rows``), each with its end user's
    id loaded (``fields``: with only those fields and the owner's loaded)."""
    if not ids:
        return {}
    only = None if fields is None else (*fields, *OWNER_FIELDS)
    columns = ", ".join(model_columns(model=kind.model, alias="m", only=only))
    where, params = _in_scope(kind, scope, rows)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns}, u.user_id "  # noqa: S608
            f"FROM {kind.table} m JOIN {EndUser._meta.db_table} u "
            f"ON u.id = m.end_user_id WHERE m.id = ANY(%(ids)s::bigint[]) AND {where}",
            params | {"ids": ids},
        )
        fetched = cursor.fetchall()
    rows: dict[int, models.Model] = {}
    for record in fetched:
        *values, user_id = record
        row = instance_build(model=kind.model, values=values, from_cursor=True, only=only)
        # The serializers read only the user's id: the rest of the row stays unread.
        row.end_user = EndUser.from_db(
            DEFAULT_DB_ALIAS,
            ["id", "organization_id", "user_id"],
            [row.end_user_id, row.organization_id, user_id],
        )
        rows[row.pk] = row
    return rows


def _field_matches(kind: SearchableKind, field_name: str, query: str, ids: list[int]) -> set[int]:
    """Which of these rows hold one of the query's lexemes in that one field."""
    lexemes = query_lexemes(query)
    if not ids or not lexemes:
        return set()
    tsquery = " | ".join("'" + lexeme.replace("'", "''") + "'" for lexeme in lexemes)
    table = kind.table
    column = kind.column(field_name)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id FROM {table} WHERE id = ANY(%(ids)s::bigint[]) AND "  # noqa: S608
            f"to_tsvector(%(config)s::regconfig, coalesce({column}::text, '')) "
            f"@@ to_tsquery('simple', %(query)s)",
            {"ids": ids, "config": settings.TEXT_SEARCH_CONFIG, "query": tsquery},
        )
        return {row[0] for row in cursor.fetchall()}


def _timed(lane_ms: dict[str, float], lane: str, function: Callable[[], T]) -> Callable[[], T]:
    def run() -> T:
        began = time.perf_counter()
        try:
            return function()
        finally:
            lane_ms[lane] = lane_ms.get(lane, 0.0) + (time.perf_counter() - began) * 1000

    return run


def _keyword_lane(
    kind: SearchableKind,
    request: SearchRequest,
    scope: Scope,
    *,
    limit: int,
    allowed: set[int] | None,
) -> list[tuple[int, float]]:
    """BM25 over the rows ``allowed`` (None: all), narrowed to ``search_field`` if named."""
    found = bm25_search(
        scope=scope, kind=kind, query=request.query, limit=limit, allowed_ids=allowed
    )
    if request.search_field:
        matching = _field_matches(kind, request.search_field, request.query, [i for i, _ in found])
        found = [(row_id, score) for row_id, score in found if row_id in matching]
    return found


def _search_kind(
    kind: SearchableKind,
    request: SearchRequest,
    scope: Scope,
    *,
    embedder: EmbeddingProvider | None,
    vector: Callable[[], list[float] | None],
    awaited: Callable[[], None],
    gate: Callable[[], dict[str, Thresholds | None]],
    lane_ms: dict[str, float],
) -> list[Candidate]:
    allowed = _allowed_ids(kind, request, scope)
    # The time lane's rows: None when the words name no time (or the kind has none).
    spoken = _spoken_ids(kind, request, scope)
    fused_lanes = request.method == "hybrid" or spoken is not None
    fetch = request.limit * OVERFETCH if fused_lanes else request.limit
    hybrid = request.method == "hybrid"
    model = embedder.model_name if embedder is not None else None

    def nearest_in(allowed_ids: set[int] | None, lane: str) -> list[tuple[int, float]]:
        query = vector()  # the lane waits for the embedding; its time starts after
        if query is None or model is None:
            return []
        return _timed(
            lane_ms,
            lane,
            partial(
                vector_search,
                scope=scope,
                kind=kind,
                vector=query,
                model=model,
                limit=fetch,
                max_distance=request.similarity_threshold,
                allowed_ids=allowed_ids,
            ),
        )()

    nearest: Lane[list[tuple[int, float]]] | None = None
    if request.method in ("embedding", "hybrid") and model is not None:
        # Started first: in a hybrid search it runs on its own connection beside BM25.
        nearest = Lane(partial(nearest_in, allowed, "vector"), beside=hybrid)
    # Read now, while the vector lane runs beside, rather than after it.
    thresholds = gate().get(kind.name)
    keywords = partial(_keyword_lane, kind, request, scope, limit=fetch)
    bm25: list[tuple[int, float]] = []
    if request.method in ("bm25", "hybrid"):
        bm25 = _timed(lane_ms, "bm25", partial(keywords, allowed=allowed))()
    # The time lane ranks the rows dated in the time named as the search's first lane does.
    time_lane: list[tuple[int, float]] = []
    distances: dict[int, float] = {}
    if spoken is not None and request.method in ("bm25", "hybrid"):
        time_lane = _timed(lane_ms, "time", partial(keywords, allowed=spoken))()
    elif spoken is not None and nearest is not None:
        awaited()
        time_lane = nearest_in(spoken, "time")
        distances = dict(time_lane)  # a vector lane: its rows come with their distances
    keyword_ids = [row_id for row_id, _ in bm25 + time_lane] if hybrid else []
    if nearest is not None:
        awaited()
    fusion, vector_weight = kind.fusion_rule()
    wants_similarities = thresholds is not None or fusion == "scores"
    query = vector() if wants_similarities and nearest is not None and keyword_ids else None
    if query is not None:
        # The gate and the fusion by scores need the similarity of what only BM25 found;
        # those are among its hits, whose distances are read here, while the vector lane may
        # still run.
        distances = distances_of(kind=kind, vector=query, model=model, document_ids=keyword_ids)
    nearest_rows = nearest.result() if nearest is not None else []
    if not fused_lanes and request.method == "bm25":
        return [
            Candidate(row_id, bm25_rank=rank, bm25_score=score, score=score)
            for rank, (row_id, score) in enumerate(bm25, start=1)
        ]
    if not fused_lanes:  # embedding
        return [
            Candidate(row_id, vector_rank=rank, similarity=1 - distance, score=1 - distance)
            for rank, (row_id, distance) in enumerate(nearest_rows, start=1)
        ]
    fused = lanes_fuse(
        fusion if hybrid else "rrf",  # one lane and the time lane: plain RRF
        bm25,
        nearest_rows,
        time=time_lane,
        distances=distances,
        bm25_weight=settings.SEARCH_BM25_WEIGHT if hybrid else 1.0,
        vector_weight=vector_weight if hybrid else 1.0,
        time_weight=settings.SEARCH_TIME_WEIGHT,
    )
    if not hybrid:
        return fused
    kept = gate_apply(fused, thresholds, fusion=fusion, fill=request.limit if kind.gate_fill else 0)
    return kept + [candidate for candidate in fused if candidate.gate == "dropped"]


def search(
    request: SearchRequest, *, scope: Scope, embedder: EmbeddingProvider | None
) -> SearchOutcome:
    """Search each requested kind's rows in scope; the best ``limit`` of each, all of them
    ordered by score."""
    if request.method not in METHODS:
        raise ValueError(request.method)
    began = time.perf_counter()
    wants_vectors = request.method in ("embedding", "hybrid") and embedder is not None
    # In a hybrid search the query is embedded in the lane pool (unless its endpoint started
    # it already) while the first kind's BM25 lane runs here: neither needs the other.
    lane = (
        query_vector_lane(request.query, embedder, beside=request.method == "hybrid")
        if wants_vectors and request.query.strip()
        else None
    )
    embedding: Callable[[], QueryVector | None] = (
        cache(lane.result) if lane is not None else lambda: None
    )

    def vector() -> list[float] | None:
        made = embedding()
        return made.vector if made is not None else None

    # When this thread first waited for the embedding: the search's own time leaves out the
    # wait, as the embedding's time is reported apart.
    waits: list[float] = []

    def awaited() -> None:
        if not waits:
            waits.append(time.perf_counter())

    # The gate's thresholds, read once, at the first point a search can wait for them.
    gate = cache(
        lambda: (
            gate_thresholds(model=embedder.model_name, kinds=request.kinds)
            if request.method == "hybrid" and embedder is not None
            else {}
        )
    )
    hits: list[Hit] = []
    gate_counts: dict[str, int] = {}
    lane_ms: dict[str, float] = {}
    for kind in request.kinds:
        candidates = _search_kind(
            kind,
            request,
            scope,
            embedder=embedder,
            vector=vector,
            awaited=awaited,
            gate=gate,
            lane_ms=lane_ms,
        )
        for candidate in candidates:
            gate_counts[candidate.gate] = gate_counts.get(candidate.gate, 0) + 1
        chosen = [c for c in candidates if c.gate != "dropped"]
        rescore = kind.rescore if request.method == "hybrid" else None
        if rescore is None:
            del chosen[request.limit :]
        rows = _rows_by_id(
            kind, scope, [c.document_id for c in chosen], kind_rows(kind, request), request.fields
        )
        found = [Hit(kind, rows[c.document_id], c) for c in chosen if c.document_id in rows]
        if rescore is not None:
            rescore(request.query, found)
            found.sort(key=lambda hit: (-hit.candidate.score, -hit.candidate.document_id))
            del found[request.limit :]
        hits.extend(found)
    if len(request.kinds) > 1:
        order = {kind.name: index for index, kind in enumerate(request.kinds)}
        hits.sort(
            key=lambda hit: (
                hit.candidate.gate != "strong",
                -hit.candidate.score,
                order[hit.kind.name],
            )
        )
    ended = time.perf_counter()
    made = embedding() if wants_vectors else None
    waited = max(made.ready_at - waits[0], 0.0) if made is not None and waits else 0.0
    return SearchOutcome(
        hits=hits,
        embedding_model=embedder.model_name if embedder is not None else None,
        gate_thresholds=gate(),
        gate_counts=gate_counts,
        embed_ms=made.ms if made is not None else 0.0,
        embed_cached=made is not None and made.cached,
        search_ms=(ended - began - waited) * 1000,
        lane_ms=lane_ms,
        wall_ms=(ended - began) * 1000,
    )
