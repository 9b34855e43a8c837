"""The HNSW indexes of the vector lane: one per kind and model that every user shares, and one
of their own for each user with many embeddings.

A search for one user walks the shared index and skips the other users' rows (pgvector's
iterative scan). A user with at most ``EXACT_SCAN_MAX_ROWS`` embeddings is scanned exactly
instead; above that, the skipping is what a search costs, and it grows with everyone else's
rows (bench/RESULTS.md, bench/retrieval_latency.py). Such a user gets a partial index of their
own (``WHERE model = M AND end_user_id = U``), which serves them many times faster. It indexes
half-precision vectors, an expression the shared index does not have, and the
vector lane orders by that expression when the index exists; over the same expression the
planner, free to choose, took the shared index for a user owning half of it.

A user who holds nearly all of a model's embeddings of a kind (more than
``OWN_INDEX_MAX_SHARE``: a one-user deployment, or one user far above the rest) gets none: the
shared graph walked for them skips few other rows, and a second graph of the same rows would
double the build (383 s at 1,000,000 here) and every write's graph insertions. The sync records
them (``SharedGraphHolder``) and the lane walks the shared graph for them as it walks an own
index; at a share of 1.0 the two walks measured alike (bench/RESULTS.md, 2026-12-07 (5)). Once
others' rows bring their share to the line, the next sync builds their own.

``vector_indexes_sync`` builds the indexes the tables call for and drops those no longer needed
(a user whose rows fell to half the line, or who is gone). Beat runs it every
``VECTOR_INDEX_SYNC_SECONDS``; ``manage.py vector_indexes`` runs it on demand (after a bulk
load); and a write of embeddings that takes a user past the line queues it at once
(``own_indexes_request``): a user importing history is otherwise served by the slower shared
index for up to ten minutes (bench/RESULTS.md, bench/experiences.py).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import redis
from celery import current_app
from django.conf import settings
from django.db import connection
from kombu.exceptions import OperationalError

from accounts.models import EndUser
from mirix_site.common import locks
from mirix_site.common.redis import redis_client
from mirix_site.search import vectors
from mirix_site.search.kinds import SearchableKind, kinds
from mirix_site.search.models import SharedGraphHolder
from mirix_site.search.vectors import (
    VALID_INDEX_SQL,
    indexed_expression,
    own_index_name,
    own_index_pattern,
    shared_index_name,
    vector_type,
)

logger = logging.getLogger(__name__)

# Keeps two syncs (two beat runs, or beat and the command) from building the same index side by
# side (its key: mirix_site.common.locks).
SYNC_LOCK = locks.VECTOR_INDEX_SYNC
# A write that takes users past the line queues one sync, then no other for this long (the
# sync builds every index due, and a later write finds any user it missed).
REQUEST_DEBOUNCE_SECONDS = 60
REQUEST_MARKER = "mirix:vector-index-sync-requested"
# The beat job that runs the sync (``tasks.sync_vector_indexes``), queued by its name: the task
# module imports this one.
SYNC_TASK = "mirix_site.search.tasks.sync_vector_indexes"
# Above this share of a model's embeddings of a kind a user gets no own index: the shared graph
# walked for them discards at most a tenth of what it visits (the iterative scan goes on until
# enough of theirs pass).
OWN_INDEX_MAX_SHARE = 0.9


def index_exists(name: str) -> bool:
    """Whether a usable index of that name exists (an invalid one counts as missing)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {VALID_INDEX_SQL}", {"index": name})
        return bool(cursor.fetchone()[0])


def _concurrently() -> str:
    """CONCURRENTLY keeps the table taking writes during a build or drop, but cannot run in a
    transaction; inside one (a caller's atomic block, a test) the statement runs plainly."""
    return "" if connection.in_atomic_block else "CONCURRENTLY "


# What pgvector holds in maintenance_work_mem per element of a graph being built, besides its
# vector: the element and its neighbour lists (m = 16). Measured from pgvector's "graph no longer
# fits" notice at 64 MB: 2,251 bytes per 384-dimension vector, 1,483 per halfvec, i.e. ~715 bytes
# besides the vector (bench/RESULTS.md, 2026-12-07); rounded up.
HNSW_ELEMENT_BYTES = 800


def hnsw_build_memory_mb(rows: int, dimensions: int, *, own: bool) -> int:
    """The maintenance_work_mem (MB) that keeps a build's graph of ``rows`` vectors in memory
    (one that outgrows it is finished on disk, several times slower), at most
    ``VECTOR_INDEX_BUILD_MEMORY_MB``."""
    vector_bytes = (2 if vector_type(own=own) == "halfvec" else 4) * dimensions
    needed_mb = math.ceil(rows * (vector_bytes + HNSW_ELEMENT_BYTES) / 2**20)
    return max(64, min(needed_mb, settings.VECTOR_INDEX_BUILD_MEMORY_MB))


def hnsw_index_create(
    kind: SearchableKind,
    model: str,
    dimensions: int,
    *,
    end_user_id: int | None = None,
    rows: int | None = None,
) -> str:
    """Build the shared index of ``model`` (or, with ``end_user_id``, that user's own),
    without blocking writes when outside a transaction. ``rows``, when known, sizes the build's
    memory: a graph that outgrows maintenance_work_mem is finished on disk, several times
    slower. Returns its name."""
    table = kind.embedding_table
    quoted_model = model.replace("'", "''")
    own = end_user_id is not None
    if own:
        name = own_index_name(kind, model, end_user_id)
        where = f"model = '{quoted_model}' AND end_user_id = {int(end_user_id)}"
    else:
        name, where = shared_index_name(kind, model), f"model = '{quoted_model}'"
    expression = f"{indexed_expression(dimensions, own=own)} {vector_type(own=own)}_cosine_ops"
    with connection.cursor() as cursor:
        # An interrupted concurrent build leaves an invalid index that IF NOT EXISTS would keep.
        if not index_exists(name):
            cursor.execute(f"DROP INDEX {_concurrently()}IF EXISTS {name}")
        if rows:
            memory_mb = hnsw_build_memory_mb(rows, dimensions, own=own)
            cursor.execute(f"SET maintenance_work_mem = '{memory_mb}MB'")
        try:
            cursor.execute(
                f"CREATE INDEX {_concurrently()}IF NOT EXISTS {name} ON {table} USING hnsw "
                f"({expression}) WITH (m = 16, ef_construction = 64) WHERE {where}"
            )
        finally:
            if rows:
                cursor.execute("RESET maintenance_work_mem")
    return name


@dataclass
class VectorIndexSync:
    built: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    # Users who hold the shared graph (no own index), as "kind, model: user N holds P%".
    holders: list[str] = field(default_factory=list)
    skipped: bool = False  # another sync held the lock


@dataclass(frozen=True)
class Owner:
    """One user's embeddings of one kind and model, as the sync counted them."""

    rows: int
    dimensions: int
    share: float  # of the model's embeddings of the kind

    @property
    def holds_the_graph(self) -> bool:
        return self.share > OWN_INDEX_MAX_SHARE


def _owners_counted(kind: SearchableKind) -> dict[tuple[str, int], Owner]:
    """(model, end user) -> their count for every owner above half the line."""
    table = kind.embedding_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT model, end_user_id, rows, rows::float8 / total FROM (SELECT model, "  # noqa: S608
            "end_user_id, count(*) AS rows, sum(count(*)) OVER (PARTITION BY model) AS total "
            f"FROM {table} GROUP BY model, end_user_id) AS owners WHERE rows > %s",
            [vectors.EXACT_SCAN_MAX_ROWS // 2],
        )
        counted = cursor.fetchall()
        dimensions: dict[str, int] = {}
        for model in {model for model, *_ in counted}:
            cursor.execute(
                f"SELECT vector_dims(embedding) FROM {table} WHERE model = %s LIMIT 1",  # noqa: S608
                [model],
            )
            dimensions[model] = cursor.fetchone()[0]
    return {
        (model, user): Owner(rows, dimensions[model], share) for model, user, rows, share in counted
    }


def _holders_record(kind: SearchableKind, holders: dict[str, tuple[int, float]]) -> list[str]:
    """Record the kind's graph holders (model -> (user, share)), forgetting any others."""
    SharedGraphHolder.objects.filter(kind=kind.code).exclude(model__in=list(holders)).delete()
    organizations = dict(
        EndUser.objects.filter(pk__in=[user for user, _ in holders.values()]).values_list(
            "pk", "organization_id"
        )
    )
    for model, (user, share) in holders.items():
        SharedGraphHolder.objects.update_or_create(
            kind=kind.code,
            model=model,
            defaults={"end_user_id": user, "organization_id": organizations[user], "share": share},
        )
    return [
        f"{kind.name}, {model}: user {user} holds {share:.1%}"
        for model, (user, share) in sorted(holders.items())
    ]


def _own_indexes(kind: SearchableKind) -> set[str]:
    table = kind.embedding_table
    pattern = own_index_pattern(kind)
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s", [table])
        return {name for (name,) in cursor.fetchall() if pattern.match(name)}


def vector_indexes_sync(*, progress: Callable[[str], None] | None = None) -> VectorIndexSync:
    """Give every user above ``EXACT_SCAN_MAX_ROWS`` embeddings (of one kind and model) an
    HNSW index of their own, but the one holding most of the model's, who is recorded as the
    shared graph's holder; drop the own indexes of users now at or below half the line, or
    gone. A second sync started meanwhile returns at once."""
    outcome = VectorIndexSync()
    with locks.held_if_free(SYNC_LOCK) as taken:
        if not taken:
            outcome.skipped = True
            return outcome
        for kind in kinds():
            owners = _owners_counted(kind)
            kept = {own_index_name(kind, model, user) for model, user in owners}
            for name in sorted(_own_indexes(kind) - kept):
                with connection.cursor() as cursor:
                    cursor.execute(f"DROP INDEX {_concurrently()}IF EXISTS {name}")
                outcome.dropped.append(name)
            # Past the line without a usable index of their own: the graph's holder (recorded
            # before the builds, which take minutes) or due one (an index built stays theirs).
            due = [
                (model, user, owner)
                for (model, user), owner in sorted(owners.items())
                if owner.rows > vectors.EXACT_SCAN_MAX_ROWS
                and not index_exists(own_index_name(kind, model, user))
            ]
            outcome.holders += _holders_record(
                kind,
                {model: (user, owner.share) for model, user, owner in due if owner.holds_the_graph},
            )
            for model, user, owner in due:
                if owner.holds_the_graph:
                    continue
                name = own_index_name(kind, model, user)
                if progress is not None:
                    progress(f"building {name}: {kind.name}, {model}, {owner.rows:,} embeddings")
                hnsw_index_create(kind, model, owner.dimensions, end_user_id=user, rows=owner.rows)
                outcome.built.append(name)
    if outcome.dropped or outcome.built:
        # This process's searches stop taking the dropped ones, and a holder given an index
        # of their own takes it rather than the shared graph.
        vectors.own_index_seen_forget()
    if outcome.built or outcome.dropped:
        logger.info("vector indexes: built %s, dropped %s", outcome.built, outcome.dropped)
    return outcome


def own_indexes_wanted(
    kind: SearchableKind, model: str, end_user_ids: Collection[int]
) -> list[int]:
    """Those of these users who hold more than ``EXACT_SCAN_MAX_ROWS`` embeddings of the kind
    and model and have no usable index of their own, nor hold the shared graph (a sync would
    build them none). One query, counting each user's rows no further than the line."""
    users = sorted({int(user) for user in end_user_ids})
    if not users:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT u.id FROM unnest(%(users)s::bigint[], %(names)s::text[]) AS u(id, name) "  # noqa: S608
            "WHERE NOT EXISTS (SELECT 1 FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid "
            "WHERE c.relname = u.name AND i.indisvalid) "
            f"AND NOT EXISTS (SELECT 1 FROM {SharedGraphHolder._meta.db_table} h "
            "WHERE h.end_user_id = u.id AND h.kind = %(kind)s AND h.model = %(model)s) "
            f"AND (SELECT count(*) FROM (SELECT 1 FROM {kind.embedding_table} e "
            "WHERE e.end_user_id = u.id AND e.model = %(model)s LIMIT %(up_to)s) AS r) "
            "> %(line)s ORDER BY u.id",
            {
                "users": users,
                "names": [own_index_name(kind, model, user) for user in users],
                "model": model,
                "kind": kind.code,
                "up_to": vectors.EXACT_SCAN_MAX_ROWS + 1,
                "line": vectors.EXACT_SCAN_MAX_ROWS,
            },
        )
        return [row[0] for row in cursor.fetchall()]


def own_indexes_request(written: dict[tuple[SearchableKind, str], set[int]]) -> bool:
    """Queue a sync now if these writes ((kind, model) -> the users whose embeddings were
    written) took one of the users past the line without an index of their own; at most one
    per ``REQUEST_DEBOUNCE_SECONDS``. Returns whether it queued one. With Redis unreachable
    nothing is queued: beat's sync builds the index in time."""
    if not any(own_indexes_wanted(kind, model, users) for (kind, model), users in written.items()):
        return False
    try:
        if not redis_client().set(REQUEST_MARKER, 1, nx=True, ex=REQUEST_DEBOUNCE_SECONDS):
            return False
        current_app.send_task(SYNC_TASK)
    except (redis.RedisError, OperationalError) as error:
        logger.info("vector index sync not queued (%s): beat's next run builds it", error)
        return False
    return True
