"""The vector lane: cosine distance over each kind's embeddings of one model.

Vectors of every model share one column; each model has its own partial HNSW index over a
cast to its dimension, and queries name the model and cast the same way, so vectors of
different models or sizes are never compared. Many users share an index, and filtering by
owner after an index scan can leave a small user with nothing, so each query picks its path:
an exact scan of the user's own rows when they are few, otherwise the HNSW index with
pgvector 0.8's iterative scan, which keeps scanning until enough rows pass the filter. A user
with more rows than the exact scan takes gets an index of their own
(``mirix_site.search.vector_indexes``), over half-precision vectors: its query orders by that
expression, which only that index serves (the planner, left to choose between the shared index
and a user's own over the same expression, took the shared one when the user owned half of it),
and reports the full-precision distance. A user who holds nearly all of a model's vectors gets
none, and walks the shared graph with an own index's settings.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Collection
from functools import cache

from django.db import connection

from accounts.tenancy import Scope
from mirix_site.search.kinds import SearchableKind
from mirix_site.search.models import SharedGraphHolder

logger = logging.getLogger(__name__)

# Below this many embeddings in scope an exact scan (an index lookup of the owner's rows and
# a sort) is both exact and faster than an approximate index scan.
EXACT_SCAN_MAX_ROWS = 5000
# The fewest candidates an HNSW search keeps (ef_search), by index: a user's own index recalls
# nearly all at 200. The shared index serves a user past EXACT_SCAN_MAX_ROWS only until beat
# builds their own, but there the graph walk now and then settles in the wrong cluster, which
# 800 prevented, for a few milliseconds more per search (bench/RESULTS.md).
HNSW_OWN_EF_SEARCH_MIN = 200
HNSW_SHARED_EF_SEARCH_MIN = 800
# ef_search per row fetched, by index. The shared index: 4 (near or below the rows fetched, the
# iterative scan runs more, costly passes for the last rows that pass the owner filter). A
# user's own index holds only their rows, and 2 is enough: for recommend's 250 rows from a
# 10,000-row own index, ef_search 1,000 took 14-15 ms (slower than the exact scan, 12-14 ms),
# 500 took 4.6 ms and 300 4.2 ms, each with all 250 of the exact top 250 (3 queries).
HNSW_OWN_EF_PER_ROW = 2
HNSW_SHARED_EF_PER_ROW = 4
HNSW_MAX_SCAN_TUPLES = 40_000


@cache
def _iterative_scan_supported() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cursor.fetchone()
    version = tuple(int(part) for part in (row[0] if row else "0").split(".")[:2])
    return version >= (0, 8)


def _vector_literal(vector: list[float]) -> str:
    return "[" + ",".join(f"{value:.7g}" for value in vector) + "]"


# --- The indexes this lane reads. Their names, expressions and validity are decided here, and
# mirix_site.search.vector_indexes builds them from the same functions: an index whose expression
# differs from the query's by a character is never used.


def _model_digest(model: str) -> str:
    return hashlib.sha1(model.encode(), usedforsecurity=False).hexdigest()[:8]


def shared_index_name(kind: SearchableKind, model: str) -> str:
    """The shared index of a model other than the default (the default's is the migrations')."""
    return f"{kind.embedding_table}_{_model_digest(model)}_hnsw"


def own_index_name(kind: SearchableKind, model: str, end_user_id: int) -> str:
    """The name of one user's own index over one model's vectors of one kind."""
    return f"{kind.embedding_table}_{_model_digest(model)}_u{int(end_user_id)}"


def own_index_pattern(kind: SearchableKind) -> re.Pattern[str]:
    """Matches the names ``own_index_name`` gives on that kind's table (any model, any user)."""
    return re.compile(rf"^{kind.embedding_table}_[0-9a-f]{{8}}_u\d+$")


def vector_type(*, own: bool) -> str:
    """A user's own index holds half-precision vectors: half the pages to walk, the ranking all
    but unchanged, and an expression no shared index has, so that only it serves that order."""
    return "halfvec" if own else "vector"


def indexed_expression(dimensions: int, *, own: bool) -> str:
    """What an HNSW index holds and the lane orders by: the column cast to one model's size."""
    return f"(embedding::{vector_type(own=own)}({int(dimensions)}))"


def _cosine_distance(dimensions: int, *, own: bool = False) -> str:
    cast = f"{vector_type(own=own)}({int(dimensions)})"
    return f"{indexed_expression(dimensions, own=own)} <=> %(query)s::{cast}"


# Whether the index named %(index)s exists and is usable (an interrupted concurrent build leaves
# an invalid one behind).
VALID_INDEX_SQL = (
    "EXISTS (SELECT 1 FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid "
    "WHERE c.relname = %(index)s AND i.indisvalid)"
)


# Own indexes seen usable, by name, with when: a search of their user takes them without asking
# again for this long. Asking is a second round trip on every search of a large user (a third of
# recall's vector lane under load). Safe to be stale: a dropped index's user holds at most half
# EXACT_SCAN_MAX_ROWS, and the own-ordered query without its index scans them exactly.
OWN_INDEX_SEEN_SECONDS = 60.0
_own_seen: dict[str, float] = {}


def own_index_seen_forget() -> None:
    """Ask the database again on the next search of every user (tests that drop indexes)."""
    _own_seen.clear()


def _path(scope: Scope, kind: SearchableKind, model: str) -> str:
    """Which path a search takes: "own" when the user has a usable index of their own (built
    only past EXACT_SCAN_MAX_ROWS); "holder" when they hold most of the shared graph
    (``SharedGraphHolder``: walked as an own index is); else "exact" when the scope holds at
    most EXACT_SCAN_MAX_ROWS embeddings of the model (counted no further, and not at all for
    the other two: counting 5,000 rows costs 0.7 ms), else "shared". One query."""
    where, params = scope.where()
    table = kind.embedding_table
    own = own_index_name(kind, model, scope.end_user_id) if scope.end_user_id is not None else ""
    for path, key in (("own", own), ("holder", f"{own}:holder")):
        if time.monotonic() - _own_seen.get(key, -OWN_INDEX_SEEN_SECONDS) < OWN_INDEX_SEEN_SECONDS:
            return path
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT own.usable, own.holder, CASE WHEN own.usable OR own.holder THEN NULL ELSE "  # noqa: S608
            f"(SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {where} "
            "AND model = %(model)s LIMIT %(up_to)s) AS rows) END "
            f"FROM (SELECT {VALID_INDEX_SQL} AS usable, EXISTS (SELECT 1 FROM "
            f"{SharedGraphHolder._meta.db_table} WHERE end_user_id = %(holder)s "
            "AND kind = %(kind)s AND model = %(model)s) AS holder) AS own",
            params
            | {
                "model": model,
                "up_to": EXACT_SCAN_MAX_ROWS + 1,
                "index": own,
                "holder": scope.end_user_id,
                "kind": kind.code,
            },
        )
        has_own, holder, rows = cursor.fetchone()
    if has_own:
        _own_seen[own] = time.monotonic()
        return "own"
    if holder:
        _own_seen[f"{own}:holder"] = time.monotonic()
        return "holder"
    return "exact" if rows <= EXACT_SCAN_MAX_ROWS else "shared"


def vector_search(
    *,
    scope: Scope,
    kind: SearchableKind,
    vector: list[float],
    model: str,
    limit: int,
    allowed_ids: Collection[int] | None = None,
    max_distance: float | None = None,
    exact: bool | None = None,
) -> list[tuple[int, float]]:
    """The ``limit`` nearest rows as (row id, cosine distance), nearest first. A row's
    distance is that of its nearest chunk. ``exact`` forces a path (None: choose)."""
    if limit <= 0 or (allowed_ids is not None and not allowed_ids):
        return []
    dimensions = len(vector)
    table, key = kind.embedding_table, kind.embedding_key
    in_scope, params = scope.where()
    # The cast must read exactly like the index expression for the planner to use the index.
    distance = _cosine_distance(dimensions)
    params |= {"query": _vector_literal(vector), "model": model, "limit": limit}
    restriction = ""
    if allowed_ids is not None:
        restriction = f"AND {key} = ANY(%(allowed)s::bigint[])"
        params["allowed"] = list(allowed_ids)
    if exact or (allowed_ids is not None and len(allowed_ids) <= EXACT_SCAN_MAX_ROWS):
        path = "exact"
    else:
        path = _path(scope, kind, model)
        if exact is False and path == "exact":
            path = "shared"
    where = f"{in_scope} AND model = %(model)s {restriction}"
    if path == "exact":
        # "+ 0" keeps the planner from walking the HNSW index for this ORDER BY: the owner's
        # rows come from the owner index and are ranked exactly.
        sql = (
            f"SELECT {key}, min({distance}) AS distance FROM {table} "  # noqa: S608
            f"WHERE {where} GROUP BY {key} ORDER BY min({distance}) + 0 LIMIT %(limit)s"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
    else:
        # Chunks of one row can take several places: fetch a few more, keep each row's best.
        # ef_search well above the rows fetched (HNSW_*_EF_PER_ROW).
        fetch = limit + max(10, limit // 4)
        params["fetch"] = fetch
        order = _cosine_distance(dimensions, own=path == "own")
        # The holder of the shared graph walks it as an own index: the filter drops few rows.
        walked_as_own = path in ("own", "holder")
        least = HNSW_OWN_EF_SEARCH_MIN if walked_as_own else HNSW_SHARED_EF_SEARCH_MIN
        per_row = HNSW_OWN_EF_PER_ROW if walked_as_own else HNSW_SHARED_EF_PER_ROW
        scan_settings = {"hnsw.ef_search": str(max(least, per_row * fetch))}
        if _iterative_scan_supported():
            scan_settings |= {
                "hnsw.iterative_scan": "relaxed_order",
                "hnsw.max_scan_tuples": str(HNSW_MAX_SCAN_TUPLES),
            }
        # The statement sets its own scan settings, transaction-local: an uncorrelated
        # subquery in WHERE becomes a one-time filter above the index scan, run before the scan
        # reads its first tuple. One round trip, no transaction around it (BEGIN, the settings
        # and COMMIT were three more), nothing left on the connection, whatever pools it. The
        # round trips it saves were measured side by side (bench/RESULTS.md, retrieval_latency:
        # "the set_config subquery kept").
        configure = []
        for number, (name, value) in enumerate(scan_settings.items()):
            configure.append(f"set_config('{name}', %(setting_{number})s, true)")
            params[f"setting_{number}"] = value
        sql = (
            f"SELECT {key}, {distance} AS distance FROM {table} "  # noqa: S608
            f"WHERE {where} AND (SELECT concat({', '.join(configure)})) IS NOT NULL "
            f"ORDER BY {order} LIMIT %(fetch)s"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
    best: dict[int, float] = {}
    for document_id, value in rows:
        if document_id not in best or value < best[document_id]:
            best[document_id] = value
    ranked = sorted(best.items(), key=lambda item: (item[1], -item[0]))
    if max_distance is not None:
        ranked = [(document_id, value) for document_id, value in ranked if value < max_distance]
    return ranked[:limit]


def distances_of(
    *, kind: SearchableKind, vector: list[float], model: str, document_ids: Collection[int]
) -> dict[int, float]:
    """The cosine distance of these rows (their nearest chunk) to the query."""
    if not document_ids:
        return {}
    dimensions = len(vector)
    table, key = kind.embedding_table, kind.embedding_key
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {key}, min({_cosine_distance(dimensions)}) "  # noqa: S608
            f"FROM {table} WHERE {key} = ANY(%(ids)s::bigint[]) AND model = %(model)s "
            f"GROUP BY {key}",
            {"query": _vector_literal(vector), "ids": list(document_ids), "model": model},
        )
        return dict(cursor.fetchall())
