"""Posting segments: the postings of an owner with many documents, packed per lexeme.

BM25 reads a query term's postings through index-only scans of ``memory_posting``: about a
quarter of a microsecond a tuple, and a common term of a user of 1,000,000 memories has
100,000 of them, several such terms a query (bench/RESULTS.md, 2026-12-07 (3)). For an owner
(user, client, kind) of at least ``BM25_SEGMENT_MIN_DOCUMENTS`` documents, beat packs each
lexeme's postings into one row (``PostingSegment``: document ids, tfs and lengths as arrays)
and a search of that owner reads the few rows of its terms and scores them with numpy.

A segment is a copy as of its build; it never changes until the next build. What it lacks is
read from the postings, which stay the truth:
- documents above the cover's line (``SegmentCover.through_document_id``): the postings'
  index reads them by range;
- documents at or below it whose postings were removed or written since the build: the index
  writer's own statements list them in ``SegmentChange``; their copies in the segments are
  ignored and their postings, if any, read by id.
A build records its line before reading, then waits for every transaction already writing
postings to end (as CREATE INDEX CONCURRENTLY does): a write that began before the line was
recorded is in what it reads, one that began after lists its document as changed. Statistics
(N, df, the average length) are the postings' own, kept on write, so scores are exactly those
of the postings' path. Beat builds again when what the segments lack passes a tenth of them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from accounts.tenancy import Scope
from mirix_site.common import locks
from mirix_site.common.database import prepared_cursor
from mirix_site.search.kinds import SearchableKind, kinds
from mirix_site.search.models import (
    DocumentStats,
    Posting,
    PostingSegment,
    SegmentChange,
    SegmentCover,
)

logger = logging.getLogger(__name__)

_POSTINGS = Posting._meta.db_table
_SEGMENTS = PostingSegment._meta.db_table
_COVERS = SegmentCover._meta.db_table
_CHANGES = SegmentChange._meta.db_table
_DOCUMENTS = DocumentStats._meta.db_table

# Keeps two syncs (two beat runs, or beat and the command) from building the same owner's
# segments side by side (its key: mirix_site.common.locks).
SYNC_LOCK = locks.POSTING_SEGMENTS_SYNC
# A build waits at most this long for the transactions already writing postings to end.
WRITERS_WAIT_SECONDS = 300.0
# Beat builds an owner's segments again once the documents they lack (written or changed
# since) pass this fraction of those they hold.
REBUILD_FRACTION = 0.1
# The arrays' layouts (PostgreSQL's int8send / int4send: big-endian).
_IDS = np.dtype(">i8")
_COUNTS = np.dtype(">i4")


def kept_from() -> int:
    """The fewest documents an owner keeps its segments with: half those it gets them from."""
    return settings.BM25_SEGMENT_MIN_DOCUMENTS // 2


@dataclass(frozen=True)
class Cover:
    client_id: str
    through_document_id: int


@dataclass(frozen=True)
class Covers:
    """The ready covers of a scope's owners, and the scope's other clients holding documents
    of the kind (whose postings are read whole)."""

    covers: tuple[Cover, ...]
    others: tuple[str, ...]


def covers_in_scope(scope: Scope, kind: SearchableKind, *, documents: int) -> Covers:
    """Only for a scope of one user: an organization-wide search reads the postings. A scope
    of fewer ``documents`` (of the kind) than the smallest owner that keeps its segments has
    none, and is answered without a statement."""
    if scope.end_user_id is None or documents < kept_from():
        return Covers((), ())
    where, params = scope.where("d.")
    params["kind"] = kind.code
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT d.client_id, c.through_document_id FROM {_DOCUMENTS} d "  # noqa: S608
            f"LEFT JOIN {_COVERS} c ON c.end_user_id = d.end_user_id "
            "AND c.client_id = d.client_id AND c.kind = d.kind AND c.ready "
            f"WHERE {where} AND d.kind = %(kind)s AND d.doc_count > 0 ORDER BY d.client_id",
            params,
        )
        rows = cursor.fetchall()
    return Covers(
        tuple(Cover(client, through) for client, through in rows if through is not None),
        tuple(client for client, through in rows if through is None),
    )


@dataclass(frozen=True)
class Term:
    lexeme: str
    idf: float


def scored(
    scope: Scope,
    kind: SearchableKind,
    terms: Sequence[Term],
    found: Covers,
    *,
    average: float,
    limit: int,
    allowed_ids: Collection[int] | None,
    k1: float,
    b: float,
) -> list[tuple[int, float]]:
    """BM25's ``limit`` best (document id, score) of the terms over the scope, best first (ties:
    newer first), reading the covered owners' segments and the postings they lack."""
    changed, by_lexeme = _arrays_read(scope, kind, [term.lexeme for term in terms], found)
    allowed = None if allowed_ids is None else np.fromiter(allowed_ids, dtype=np.int64)
    # Summed in the terms' order, as the postings' paths do: equal scores stay equal.
    ids_parts, score_parts = [], []
    for term in terms:
        for source, *arrays in by_lexeme.get(term.lexeme, []):
            keep = None
            if source == _SEGMENT and changed.size:
                keep = ~np.isin(arrays[0], changed)  # read from the postings instead
            if allowed is not None:
                within = np.isin(arrays[0], allowed)
                keep = within if keep is None else keep & within
            document_ids, tf, length = arrays if keep is None else (a[keep] for a in arrays)
            ids_parts.append(document_ids)
            # As bm25.term_weight, operation for operation: the same doubles.
            weight = tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / average))
            score_parts.append(term.idf * weight)
    ids = np.concatenate(ids_parts) if ids_parts else np.empty(0, dtype=np.int64)
    if not ids.size:
        return []
    # A stable sort keeps each document's contributions in the terms' order, and merges the
    # segments' runs (each in document order) cheaply.
    order = np.argsort(ids, kind="stable")
    ids, scores = ids[order], np.concatenate(score_parts)[order]
    starts = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
    documents, totals = ids[starts], np.add.reduceat(scores, starts)
    if totals.size > limit:
        # Every document tied with the limit-th score, then exact ordering among those few.
        line = np.partition(totals, totals.size - limit)[totals.size - limit]
        candidates = np.nonzero(totals >= line)[0]
    else:
        candidates = np.arange(totals.size)
    ranked = sorted(
        ((int(documents[i]), float(totals[i])) for i in candidates),
        key=lambda item: (item[1], item[0]),
        reverse=True,
    )
    return ranked[:limit]


# What each row of _arrays_read's statement is.
_CHANGED, _SEGMENT, _LACKED = 0, 1, 2
Arrays = tuple[int, np.ndarray, np.ndarray, np.ndarray]  # source, document ids, tfs, lengths


def _arrays_read(
    scope: Scope, kind: SearchableKind, lexemes: list[str], found: Covers
) -> tuple[np.ndarray, dict[str, list[Arrays]]]:
    """The covered owners' changed documents, and per lexeme its postings in scope as arrays:
    the covered owners' segments, and the postings they lack (the documents above their line
    or changed, and every posting of the scope's other clients holding documents), each part
    read from the postings' index by range or by id but the other clients' (rare: one user's
    memories written through several clients). One statement, its results in binary: the
    arrays travel as their bytes (hex text took 2.7 times as long at 1,000,000 memories)."""
    where, params = scope.where()
    params |= {
        "kind": kind.code,
        "lexemes": lexemes,
        "covered": [cover.client_id for cover in found.covers],
        "throughs": [cover.through_document_id for cover in found.covers],
        "lowest": min(cover.through_document_id for cover in found.covers),
        "others": list(found.others),
    }
    in_scope = f"{where} AND kind = %(kind)s"
    postings = (
        f"SELECT client_id, lexeme, document_id, tf, doc_length FROM {_POSTINGS} "  # noqa: S608
        f"WHERE {in_scope} AND lexeme = ANY(%(lexemes)s::text[]) "
    )
    lacked = [
        postings + "AND document_id > %(lowest)s",
        postings + "AND document_id = ANY(ARRAY(SELECT document_id FROM changed))",  # noqa: S608
    ]
    if found.others:
        lacked.append(postings + "AND client_id = ANY(%(others)s::text[])")
    packed = "string_agg({}, ''::bytea ORDER BY l.document_id)"
    statement = (
        f"WITH changed AS MATERIALIZED (SELECT document_id FROM {_CHANGES} "  # noqa: S608
        f"WHERE {in_scope} AND client_id = ANY(%(covered)s::text[])), "
        # UNION, not UNION ALL: a posting can be in two parts (a changed document above the
        # line).
        f"lacked AS ({' UNION '.join(lacked)}) "
        f"SELECT {_CHANGED}, NULL::text, string_agg(int8send(document_id), ''::bytea), "
        "NULL::bytea, NULL::bytea FROM changed "
        f"UNION ALL SELECT {_SEGMENT}, lexeme, document_ids, tfs, lengths FROM {_SEGMENTS} "
        f"WHERE {in_scope} AND client_id = ANY(%(covered)s::text[]) "
        "AND lexeme = ANY(%(lexemes)s::text[]) "
        f"UNION ALL SELECT {_LACKED}, l.lexeme, {packed.format('int8send(l.document_id)')}, "
        f"{packed.format('int4send(l.tf::int4)')}, {packed.format('int4send(l.doc_length::int4)')} "
        "FROM lacked l LEFT JOIN unnest(%(covered)s::text[], %(throughs)s::bigint[]) "
        "AS c(client_id, through) ON c.client_id = l.client_id "
        # Not in the client's own segments (a range read past another client's line can be).
        "WHERE c.through IS NULL OR l.document_id > c.through "
        "OR l.document_id = ANY(ARRAY(SELECT document_id FROM changed)) "
        "GROUP BY l.lexeme"
    )
    with prepared_cursor(binary=True) as cursor:
        cursor.execute(statement, params)
        rows = cursor.fetchall()
    changed = np.empty(0, dtype=np.int64)
    by_lexeme: dict[str, list[Arrays]] = {}
    for source, lexeme, ids, tfs, lengths in rows:
        if source == _CHANGED:
            changed = _ids_of(ids)
            continue
        by_lexeme.setdefault(lexeme, []).append(
            (source, _ids_of(ids), _counts_of(tfs), _counts_of(lengths))
        )
    return changed, by_lexeme


def _ids_of(packed: bytes | None) -> np.ndarray:
    if not packed:
        return np.empty(0, dtype=np.int64)
    return np.frombuffer(packed, dtype=_IDS).astype(np.int64)


def _counts_of(packed: bytes) -> np.ndarray:
    return np.frombuffer(packed, dtype=_COUNTS).astype(np.float64)


# --- Building them --------------------------------------------------------------------------


@dataclass
class SegmentsSync:
    built: list[str] = field(default_factory=list)  # "kind user/client"
    dropped: list[str] = field(default_factory=list)
    skipped: bool = False  # another sync held the lock


def segments_sync(*, progress: Callable[[str], None] | None = None) -> SegmentsSync:
    """Build the segments of every owner of at least ``BM25_SEGMENT_MIN_DOCUMENTS`` documents
    that has none or whose segments lack more than ``REBUILD_FRACTION`` of what they hold; drop
    those of owners now below half the line. A second sync started meanwhile returns at once."""
    outcome = SegmentsSync()
    with locks.held_if_free(SYNC_LOCK) as taken:
        if not taken:
            outcome.skipped = True
            return outcome
        line = settings.BM25_SEGMENT_MIN_DOCUMENTS
        for kind in kinds():
            owners = {
                (row["end_user_id"], row["client_id"]): row
                for row in DocumentStats.objects.filter(kind=kind.code).values(
                    "organization_id", "client_id", "end_user_id", "doc_count"
                )
            }
            covers = {
                (cover.end_user_id, cover.client_id): cover
                for cover in SegmentCover.objects.filter(kind=kind.code)
            }
            for key in sorted(covers):
                owner = owners.get(key)
                if owner is None or owner["doc_count"] < kept_from():
                    _segments_drop(kind, *key)
                    outcome.dropped.append(f"{kind.name} {key[0]}/{key[1]}")
            for key, owner in sorted(owners.items()):
                if owner["doc_count"] < line or not _build_due(kind, covers.get(key), owner):
                    continue
                if progress is not None:
                    progress(f"building segments of {kind.name} {key[0]}/{key[1]}")
                segments_build(kind, owner["organization_id"], key[1], key[0])
                outcome.built.append(f"{kind.name} {key[0]}/{key[1]}")
    if outcome.built or outcome.dropped:
        logger.info("posting segments: built %s, dropped %s", outcome.built, outcome.dropped)
    return outcome


def _build_due(kind: SearchableKind, cover: SegmentCover | None, owner: dict) -> bool:
    if cover is None or not cover.ready:
        return True
    changed = SegmentChange.objects.filter(
        kind=kind.code, end_user_id=cover.end_user_id, client_id=cover.client_id
    ).count()
    added = max(0, owner["doc_count"] - cover.documents)
    return changed + added > REBUILD_FRACTION * max(cover.documents, 1)


def _segments_drop(kind: SearchableKind, end_user_id: int, client_id: str) -> None:
    owned = {"kind": kind.code, "end_user_id": end_user_id, "client_id": client_id}
    with transaction.atomic():
        for model in (SegmentCover, PostingSegment, SegmentChange):
            model.objects.filter(**owned).delete()


def segments_build(
    kind: SearchableKind, organization_id: str, client_id: str, end_user_id: int
) -> SegmentCover:
    """Pack the owner's postings into segments, replacing any it had; returns its cover."""
    owned = {"kind": kind.code, "end_user_id": end_user_id, "client_id": client_id}
    with transaction.atomic():
        # The line: the owner's newest document now. Searches read the postings alone until
        # the segments below are ready; changes listed before this build no longer matter.
        newest = (
            kind.model.objects.filter(end_user_id=end_user_id, client_id=client_id)
            .order_by("-pk")
            .values_list("pk", flat=True)
            .first()
        )
        cover, _ = SegmentCover.objects.update_or_create(
            **owned,
            defaults={
                "organization_id": organization_id,
                "through_document_id": newest or 0,
                "ready": False,
                "documents": 0,
            },
        )
        SegmentChange.objects.filter(**owned).delete()
    _writers_wait()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {_SEGMENTS} WHERE kind = %(kind)s AND end_user_id = %(user)s "  # noqa: S608
            "AND client_id = %(client)s",
            {"kind": kind.code, "user": end_user_id, "client": client_id},
        )
        cursor.execute(
            f"INSERT INTO {_SEGMENTS} (organization_id, client_id, end_user_id, kind, lexeme, "  # noqa: S608
            "document_ids, tfs, lengths) "
            "SELECT %(organization)s, %(client)s, %(user)s, %(kind)s, lexeme, "
            "string_agg(int8send(document_id), ''::bytea ORDER BY document_id), "
            "string_agg(int4send(tf::int4), ''::bytea ORDER BY document_id), "
            "string_agg(int4send(doc_length::int4), ''::bytea ORDER BY document_id) "
            f"FROM {_POSTINGS} WHERE end_user_id = %(user)s AND kind = %(kind)s "
            "AND client_id = %(client)s AND document_id <= %(through)s GROUP BY lexeme",
            {
                "organization": organization_id,
                "client": client_id,
                "user": end_user_id,
                "kind": kind.code,
                "through": cover.through_document_id,
            },
        )
        documents = kind.model.objects.filter(
            end_user_id=end_user_id, client_id=client_id, pk__lte=cover.through_document_id
        ).count()
        SegmentCover.objects.filter(pk=cover.pk).update(
            ready=True, documents=documents, built_at=timezone.now()
        )
    cover.refresh_from_db()
    return cover


def _writers_wait() -> None:
    """Wait until every transaction that was writing postings when this was called has ended:
    what they wrote is then visible to a new statement, or gone."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(array_agg(DISTINCT virtualtransaction), '{}') FROM pg_locks "
            "WHERE relation = %s::regclass AND mode = 'RowExclusiveLock' "
            "AND pid <> pg_backend_pid()",
            [_POSTINGS],
        )
        writers = cursor.fetchone()[0]
        deadline = time.monotonic() + WRITERS_WAIT_SECONDS
        while writers:
            cursor.execute(
                "SELECT coalesce(array_agg(virtualxid), '{}') FROM pg_locks "
                "WHERE locktype = 'virtualxid' AND virtualxid = ANY(%s::text[])",
                [writers],
            )
            writers = cursor.fetchone()[0]
            if not writers:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"transactions writing postings still open: {writers}")
            time.sleep(0.05)
