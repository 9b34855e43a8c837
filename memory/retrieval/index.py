"""Keeping BM25's inverted index and statistics in step with the memories.

A memory's text (``memory_text``) is analysed by PostgreSQL's ``to_tsvector`` with the
configured text-search configuration; each lexeme becomes a posting (term frequency = its
number of positions, document length = all positions), and the per-(user, client, type)
statistics are adjusted in the same statement. Statistics rows are always touched in lexeme
order, so concurrent writers cannot deadlock on them.
"""

from __future__ import annotations

from collections import defaultdict

from django.conf import settings
from django.db import connection, models

from memory.types import MemoryType, memory_text

_ADD_SQL = """
WITH docs AS (
    SELECT d.memory_id, d.organization_id, d.client_id, d.end_user_id,
           to_tsvector(%(config)s::regconfig, d.body) AS tsv
      FROM unnest(%(memory_ids)s::bigint[], %(organization_ids)s::text[], %(client_ids)s::text[],
                  %(end_user_ids)s::bigint[], %(bodies)s::text[])
           AS d(memory_id, organization_id, client_id, end_user_id, body)
), lengths AS (
    SELECT docs.*, (SELECT coalesce(sum(array_length(t.positions, 1)), 0)
                      FROM unnest(docs.tsv) AS t) AS doc_length
      FROM docs
), terms AS (
    SELECT l.memory_id, l.organization_id, l.client_id, l.end_user_id, t.lexeme,
           array_length(t.positions, 1) AS tf, l.doc_length
      FROM lengths l, unnest(l.tsv) AS t
), postings AS (
    INSERT INTO memory_memoryposting
           (organization_id, client_id, end_user_id, memory_type, lexeme, memory_id, tf, doc_length)
    SELECT organization_id, client_id, end_user_id, %(memory_type)s, lexeme, memory_id, tf,
           doc_length
      FROM terms
), term_stats AS (
    INSERT INTO memory_termstats
           (organization_id, client_id, end_user_id, memory_type, lexeme, doc_frequency, max_tf)
    SELECT organization_id, client_id, end_user_id, %(memory_type)s, lexeme, count(*), max(tf)
      FROM terms
     GROUP BY organization_id, client_id, end_user_id, lexeme
     ORDER BY end_user_id, client_id, lexeme
    ON CONFLICT (end_user_id, client_id, memory_type, lexeme) DO UPDATE
       SET doc_frequency = memory_termstats.doc_frequency + EXCLUDED.doc_frequency,
           max_tf = greatest(memory_termstats.max_tf, EXCLUDED.max_tf)
)
INSERT INTO memory_documentstats
       (organization_id, client_id, end_user_id, memory_type, doc_count, total_length)
SELECT organization_id, client_id, end_user_id, %(memory_type)s, count(*), sum(doc_length)
  FROM lengths
 WHERE doc_length > 0
 GROUP BY organization_id, client_id, end_user_id
 ORDER BY end_user_id, client_id
ON CONFLICT (end_user_id, client_id, memory_type) DO UPDATE
   SET doc_count = memory_documentstats.doc_count + EXCLUDED.doc_count,
       total_length = memory_documentstats.total_length + EXCLUDED.total_length
"""

_REMOVE_SQL = """
WITH gone AS (
    DELETE FROM memory_memoryposting
     WHERE memory_type = %(memory_type)s AND memory_id = ANY(%(memory_ids)s)
    RETURNING client_id, end_user_id, lexeme, memory_id, doc_length
), term_counts AS (
    SELECT client_id, end_user_id, lexeme, count(*) AS n
      FROM gone GROUP BY client_id, end_user_id, lexeme
     ORDER BY end_user_id, client_id, lexeme
), terms_updated AS (
    UPDATE memory_termstats s
       SET doc_frequency = s.doc_frequency - c.n
      FROM term_counts c
     WHERE s.end_user_id = c.end_user_id AND s.client_id = c.client_id
       AND s.memory_type = %(memory_type)s AND s.lexeme = c.lexeme
), documents AS (
    SELECT DISTINCT client_id, end_user_id, memory_id, doc_length FROM gone
), document_counts AS (
    SELECT client_id, end_user_id, count(*) AS n, sum(doc_length) AS length
      FROM documents GROUP BY client_id, end_user_id
)
UPDATE memory_documentstats s
   SET doc_count = s.doc_count - c.n, total_length = s.total_length - c.length
  FROM document_counts c
 WHERE s.end_user_id = c.end_user_id AND s.client_id = c.client_id
   AND s.memory_type = %(memory_type)s
"""


def postings_add(rows: list[tuple[MemoryType, models.Model]]) -> None:
    """Index these (new or re-indexed) memories' text. Core blocks are not searched."""
    by_type: dict[str, list[models.Model]] = defaultdict(list)
    kinds: dict[str, MemoryType] = {}
    for kind, row in rows:
        if kind.embedding_model is not None:
            by_type[kind.name].append(row)
            kinds[kind.name] = kind
    with connection.cursor() as cursor:
        for type_name, typed in by_type.items():
            kind = kinds[type_name]
            cursor.execute(
                _ADD_SQL,
                {
                    "config": settings.TEXT_SEARCH_CONFIG,
                    "memory_type": kind.code,
                    "memory_ids": [row.pk for row in typed],
                    "organization_ids": [row.organization_id for row in typed],
                    "client_ids": [row.client_id for row in typed],
                    "end_user_ids": [row.end_user_id for row in typed],
                    "bodies": [memory_text(kind, row) for row in typed],
                },
            )


def postings_remove(kind: MemoryType, memory_ids: list[int]) -> None:
    """Take these memories out of the index (before deleting or re-indexing them)."""
    if kind.embedding_model is None or not memory_ids:
        return
    with connection.cursor() as cursor:
        cursor.execute(_REMOVE_SQL, {"memory_type": kind.code, "memory_ids": memory_ids})
