"""The engine's index writer: keeps every searchable row's postings, BM25 statistics and
embeddings in step with the row. Apps call it when they store, edit or delete searchable rows.

A row's text (``SearchableKind.text``) is analysed by PostgreSQL's ``to_tsvector`` with the
configured text-search configuration; each lexeme becomes a posting (term frequency = its
number of positions, document length = all positions), and the per-(user, client, kind)
statistics are adjusted in the same statement. Statistics rows are always touched in lexeme
order, so concurrent writers cannot deadlock on them. Embeddings are one vector per chunk that
fits the model, per model.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from functools import partial
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, models, transaction

from accounts.models import Client, EndUser
from mirix_site.providers.embeddings import EmbeddingProvider
from mirix_site.search.kinds import SearchableKind
from mirix_site.search.models import (
    DocumentStats,
    Posting,
    PostingSegment,
    SegmentChange,
    SegmentCover,
    TermStats,
)
from mirix_site.search.vector_indexes import own_indexes_request

_TABLES = {
    "postings": Posting._meta.db_table,
    "terms": TermStats._meta.db_table,
    "documents": DocumentStats._meta.db_table,
    "covers": SegmentCover._meta.db_table,
    "changes": SegmentChange._meta.db_table,
}

# A document's analysis, the one rule for every writer: its body's ``to_tsvector`` with the
# configured text-search configuration; a posting per lexeme, tf its number of positions, the
# document's length all its positions. ``{source}`` is a relation (with its alias ``d``) of
# documents: document_id, organization_id, client_id, end_user_id, body.
_TERMS_CTES = """
docs AS (
    SELECT d.document_id, d.organization_id, d.client_id, d.end_user_id,
           to_tsvector(%(config)s::regconfig, d.body) AS tsv
      FROM {source}
), lengths AS (
    SELECT docs.*, (SELECT coalesce(sum(array_length(t.positions, 1)), 0)
                      FROM unnest(docs.tsv) AS t) AS doc_length
      FROM docs
), terms AS (
    SELECT l.document_id, l.organization_id, l.client_id, l.end_user_id, t.lexeme,
           array_length(t.positions, 1) AS tf, l.doc_length
      FROM lengths l, unnest(l.tsv) AS t
)"""

_POSTINGS_INSERT = """
    INSERT INTO {postings}
           (organization_id, client_id, end_user_id, kind, lexeme, document_id, tf, doc_length)
    SELECT organization_id, client_id, end_user_id, %(kind)s, lexeme, document_id, tf,
           doc_length
      FROM terms"""

# Documents of an owner with posting segments (``mirix_site.search.segments``), at or below
# their cover's line, whose postings a statement writes or removes: the segments' copy of them
# no longer counts. ``{rows}`` yields client_id, end_user_id, document_id. One lookup of a
# unique key per owner written; nothing else when no segment covers it.
_CHANGES_MARK = """
    INSERT INTO {changes} (organization_id, client_id, end_user_id, kind, document_id)
    SELECT DISTINCT c.organization_id, r.client_id, r.end_user_id, c.kind, r.document_id
      FROM {rows} AS r
      JOIN {covers} c ON c.end_user_id = r.end_user_id AND c.client_id = r.client_id
                     AND c.kind = %(kind)s
     WHERE r.document_id <= c.through_document_id
    ON CONFLICT DO NOTHING"""

# The documents as one JSON parameter, not an array per column: psycopg dumps arrays element by
# element in Python (see mirix_site.common.rows.rows_insert).
_JSON_DOCUMENTS = """jsonb_to_recordset(%(documents)s::jsonb)
           AS d(document_id bigint, organization_id text, client_id text, end_user_id bigint,
                body text)"""

# What one write adds to the statistics, after its postings (``_ADD_SQL``).
_STATISTICS_ADD = """
), term_stats AS (
    INSERT INTO {terms}
           (organization_id, client_id, end_user_id, kind, lexeme, doc_frequency, max_tf)
    SELECT organization_id, client_id, end_user_id, %(kind)s, lexeme, count(*), max(tf)
      FROM terms
     GROUP BY organization_id, client_id, end_user_id, lexeme
     ORDER BY end_user_id, client_id, lexeme
    ON CONFLICT (end_user_id, client_id, kind, lexeme) DO UPDATE
       SET doc_frequency = {terms}.doc_frequency + EXCLUDED.doc_frequency,
           max_tf = greatest({terms}.max_tf, EXCLUDED.max_tf)
)
INSERT INTO {documents}
       (organization_id, client_id, end_user_id, kind, doc_count, total_length)
SELECT organization_id, client_id, end_user_id, %(kind)s, count(*), sum(doc_length)
  FROM lengths
 WHERE doc_length > 0
 GROUP BY organization_id, client_id, end_user_id
 ORDER BY end_user_id, client_id
ON CONFLICT (end_user_id, client_id, kind) DO UPDATE
   SET doc_count = {documents}.doc_count + EXCLUDED.doc_count,
       total_length = {documents}.total_length + EXCLUDED.total_length
""".format(**_TABLES)  # noqa: S608 (table names from the models)

_ADD_SQL = (
    "WITH "
    + _TERMS_CTES.format(source=_JSON_DOCUMENTS)
    + ", changes AS ("
    + _CHANGES_MARK.format(rows="docs", **_TABLES)
    + "), postings AS ("
    + _POSTINGS_INSERT.format(**_TABLES)
    + _STATISTICS_ADD
)

# Statistics counted from the postings, as the writes above keep them: per lexeme the documents
# holding it and its largest tf; per owner the documents with a lexeme and their total length.
# After the owners' old rows are deleted (one statement: a sibling DELETE's order is not known).
_STATISTICS_DELETE = """
WITH gone_terms AS (
    DELETE FROM {terms} WHERE kind = %(kind)s AND end_user_id = ANY(%(users)s::bigint[])
)
DELETE FROM {documents} WHERE kind = %(kind)s AND end_user_id = ANY(%(users)s::bigint[])
""".format(**_TABLES)  # noqa: S608 (table names from the models)

_STATISTICS_COUNT = """
WITH postings AS (
    SELECT organization_id, client_id, end_user_id, lexeme, document_id, tf, doc_length
      FROM {postings} WHERE kind = %(kind)s AND end_user_id = ANY(%(users)s::bigint[])
), term_stats AS (
    INSERT INTO {terms}
           (organization_id, client_id, end_user_id, kind, lexeme, doc_frequency, max_tf)
    SELECT organization_id, client_id, end_user_id, %(kind)s, lexeme, count(*), max(tf)
      FROM postings
     GROUP BY organization_id, client_id, end_user_id, lexeme
)
INSERT INTO {documents}
       (organization_id, client_id, end_user_id, kind, doc_count, total_length)
SELECT organization_id, client_id, end_user_id, %(kind)s, count(*), sum(doc_length)
  FROM (SELECT DISTINCT organization_id, client_id, end_user_id, document_id, doc_length
          FROM postings) AS documents
 GROUP BY organization_id, client_id, end_user_id
""".format(**_TABLES)  # noqa: S608 (table names from the models)

_REMOVE_SQL = """
WITH gone AS (
    DELETE FROM {postings}
     WHERE kind = %(kind)s AND document_id = ANY(%(document_ids)s::bigint[])
    RETURNING client_id, end_user_id, lexeme, document_id, doc_length
), changes AS ({changes_mark}
), term_counts AS (
    SELECT client_id, end_user_id, lexeme, count(*) AS n
      FROM gone GROUP BY client_id, end_user_id, lexeme
     ORDER BY end_user_id, client_id, lexeme
), terms_updated AS (
    UPDATE {terms} s
       SET doc_frequency = s.doc_frequency - c.n
      FROM term_counts c
     WHERE s.end_user_id = c.end_user_id AND s.client_id = c.client_id
       AND s.kind = %(kind)s AND s.lexeme = c.lexeme
), documents AS (
    SELECT DISTINCT client_id, end_user_id, document_id, doc_length FROM gone
), document_counts AS (
    SELECT client_id, end_user_id, count(*) AS n, sum(doc_length) AS length
      FROM documents GROUP BY client_id, end_user_id
)
UPDATE {documents} s
   SET doc_count = s.doc_count - c.n, total_length = s.total_length - c.length
  FROM document_counts c
 WHERE s.end_user_id = c.end_user_id AND s.client_id = c.client_id
   AND s.kind = %(kind)s
""".format(changes_mark=_CHANGES_MARK.format(rows="gone", **_TABLES), **_TABLES)  # noqa: S608


Document = tuple[SearchableKind, models.Model]


def _postings_add(documents: Sequence[Document]) -> None:
    by_kind: dict[str, list[models.Model]] = defaultdict(list)
    kinds: dict[str, SearchableKind] = {}
    for kind, row in documents:
        by_kind[kind.name].append(row)
        kinds[kind.name] = kind
    with connection.cursor() as cursor:
        for name, rows in by_kind.items():
            kind = kinds[name]
            cursor.execute(
                _ADD_SQL,
                {
                    "config": settings.TEXT_SEARCH_CONFIG,
                    "kind": kind.code,
                    "documents": json.dumps(
                        [
                            {
                                "document_id": row.pk,
                                "organization_id": row.organization_id,
                                "client_id": row.client_id,
                                "end_user_id": row.end_user_id,
                                "body": kind.text(row),
                            }
                            for row in rows
                        ],
                        ensure_ascii=False,
                    ),
                },
            )


def postings_insert(*, kind: SearchableKind, source: str, params: dict[str, Any]) -> None:
    """The postings of documents a relation yields, without their statistics: a bulk load's
    batches, whose statistics ``statistics_recount`` counts once at the end (a statistics row
    is updated once, not once per batch). ``source``: the relation with its alias ``d``, of
    columns document_id, organization_id, client_id, end_user_id, body (the kind's text);
    ``params`` its parameters."""
    sql = (
        "WITH "
        + _TERMS_CTES.format(source=source)
        + ", changes AS ("
        + _CHANGES_MARK.format(rows="docs", **_TABLES)
        + ")"
        + _POSTINGS_INSERT.format(**_TABLES)
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params | {"config": settings.TEXT_SEARCH_CONFIG, "kind": kind.code})


def statistics_recount(*, kind: SearchableKind, end_user_ids: Sequence[int]) -> None:
    """These users' BM25 statistics of the kind counted afresh from their postings, in one
    pass: what ``postings_insert`` left to be counted."""
    params = {"kind": kind.code, "users": list(end_user_ids)}
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(_STATISTICS_DELETE, params)
        cursor.execute(_STATISTICS_COUNT, params)


def _postings_remove(kind: SearchableKind, document_ids: Sequence[int]) -> None:
    if document_ids:
        with connection.cursor() as cursor:
            cursor.execute(_REMOVE_SQL, {"kind": kind.code, "document_ids": list(document_ids)})


def embeddings_write(
    *, documents: Sequence[Document], embedders: Sequence[EmbeddingProvider]
) -> None:
    """Embed each row's text with each model (in chunks that fit it) and store one vector per
    chunk, replacing that model's earlier vectors of those rows. Once that commits, a user it
    took past the exact scan's line gets an index of their own queued."""
    written: dict[tuple[SearchableKind, str], set[int]] = defaultdict(set)
    for embedder in embedders:
        _embeddings_write_one(documents, embedder)
        for kind, row in documents:
            written[kind, embedder.model_name].add(row.end_user_id)
    if written:
        transaction.on_commit(partial(own_indexes_request, dict(written)))


# Writes tried again when rows vanished under them (each try needs a new deletion to fail).
WRITE_ATTEMPTS = 3


def embeddings_write_committed(
    *, documents: Sequence[Document], embedders: Sequence[EmbeddingProvider]
) -> list[Document]:
    """``embeddings_write`` in a transaction of its own, for a worker holding none (the vectors'
    foreign keys are checked when it commits). A row deleted while its text was being embedded,
    or its owner, fails the write: the rows still there are read again and written without it.
    Returns the documents written."""
    for _attempt in range(WRITE_ATTEMPTS - 1):
        try:
            with transaction.atomic():
                embeddings_write(documents=documents, embedders=embedders)
            return list(documents)
        except IntegrityError:
            documents = _documents_reread(documents)
    with transaction.atomic():  # the last try: a third deletion in a row is raised
        embeddings_write(documents=documents, embedders=embedders)
    return list(documents)


def _documents_reread(documents: Sequence[Document]) -> list[Document]:
    """The documents whose rows still exist, as they are now."""
    by_kind: dict[str, list[int]] = defaultdict(list)
    kinds_by_name: dict[str, SearchableKind] = {}
    for kind, row in documents:
        by_kind[kind.name].append(row.pk)
        kinds_by_name[kind.name] = kind
    return [
        (kinds_by_name[name], row)
        for name, ids in by_kind.items()
        for row in kinds_by_name[name].model.objects.filter(pk__in=ids).order_by("pk")
    ]


def _embeddings_write_one(documents: Sequence[Document], embedder: EmbeddingProvider) -> None:
    # A kind that writes its own vectors is handed its rows; all the others', of any kinds, go
    # through one embedding call: the model's fixed cost per call dwarfs a few short texts.
    by_writer: dict[str, tuple[SearchableKind, list[models.Model]]] = {}
    for kind, row in documents:
        if kind.vectors_write is not None:
            by_writer.setdefault(kind.name, (kind, []))[1].append(row)
    for kind, rows in by_writer.values():
        kind.vectors_write(rows, embedder)
    documents = [(kind, row) for kind, row in documents if kind.vectors_write is None]
    if not documents:
        return
    # One vector per chunk of each row's text.
    chunks: list[tuple[SearchableKind, models.Model, int]] = []
    texts: list[str] = []
    for kind, row in documents:
        for index, piece in enumerate(kind.embedded_chunks(row, embedder.chunk)):
            chunks.append((kind, row, index))
            texts.append(piece)
    vectors = embedder.embed(texts) if texts else []
    by_kind: dict[str, list[models.Model]] = defaultdict(list)
    kinds: dict[str, SearchableKind] = {}
    for (kind, row, index), vector in zip(chunks, vectors, strict=True):
        kinds[kind.name] = kind
        by_kind[kind.name].append(
            kind.embedding_model(
                organization_id=row.organization_id,
                client_id=row.client_id,
                end_user_id=row.end_user_id,
                model=embedder.model_name,
                chunk_index=index,
                embedding=vector,
                **{kind.embedding_attname: row.pk},
            )
        )
    for name, embeddings in by_kind.items():
        kind = kinds[name]
        kind.embedding_model.objects.filter(
            **{
                f"{kind.embedding_attname}__in": [
                    getattr(embedding, kind.embedding_attname) for embedding in embeddings
                ],
                "model": embedder.model_name,
            }
        ).delete()
        kind.embedding_model.objects.bulk_create(embeddings)


# Atomic on their own, and part of the caller's transaction when it has one, without a savepoint
# of their own (two more round trips per extraction batch for nothing to roll back to).
@transaction.atomic(savepoint=False)
def documents_index(
    *, documents: Sequence[Document], embedders: Sequence[EmbeddingProvider]
) -> None:
    """Index new rows (of any kinds, several owners): postings, statistics, embeddings."""
    _postings_add(documents)
    embeddings_write(documents=documents, embedders=embedders)


@transaction.atomic(savepoint=False)
def documents_reindex(
    *, documents: Sequence[Document], embedders: Sequence[EmbeddingProvider]
) -> None:
    """Index rows again after their text changed."""
    by_kind: dict[str, tuple[SearchableKind, list[int]]] = {}
    for kind, row in documents:
        by_kind.setdefault(kind.name, (kind, []))[1].append(row.pk)
    for kind, ids in by_kind.values():
        _postings_remove(kind, ids)
    documents_index(documents=documents, embedders=embedders)


def documents_unindex(*, kind: SearchableKind, document_ids: Sequence[int]) -> None:
    """Take rows out of the index before deleting them (their embeddings go with the rows)."""
    _postings_remove(kind, document_ids)


@transaction.atomic(savepoint=False)
def index_clear(*, kinds: Sequence[SearchableKind], end_user: EndUser, client: Client) -> None:
    """Take every row of these kinds that the client holds about the user out of the index,
    before deleting them all: their index rows go whole, not posting by posting."""
    owned = {"end_user": end_user, "client": client, "kind__in": [kind.code for kind in kinds]}
    for model in (Posting, TermStats, DocumentStats, PostingSegment, SegmentCover, SegmentChange):
        model.objects.filter(**owned).delete()
