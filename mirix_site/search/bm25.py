"""Okapi BM25 over the inverted index, exact, with MaxScore-style pruning.

    score(d) = Σ_t idf(t) · tf(t,d)·(k1+1) / (tf(t,d) + k1·(1 - b + b·|d|/avgdl))
    idf(t)   = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

over the query's distinct lexemes (``to_tsvector`` of the query, OR semantics), with N, df and
avgdl taken over the documents of one kind the caller may read for that user (its own client
and the clients in its read scopes), from statistics kept on write. k1 = 1.2, b = 0.75.

A query whose terms have few postings in scope (``SINGLE_STATEMENT_POSTINGS``) is scored by
the database in one statement: a round trip per term cost more than reading them all. Past
that, exact top-k without scoring everything: terms are visited from the highest possible
contribution down (rare terms first). Once k documents have partial scores and the k-th of
them beats the most an unseen document could still gather, no unseen document can enter the
top k: later (common) terms are then looked up only for the documents that can still make it,
by id, instead of reading their whole posting lists. A document that is dropped can no longer
reach the k-th score, so every document returned has its full score.

A user with posting segments (``mirix_site.search.segments``: beat packs the postings of an
owner of many documents) is scored from them instead, whatever its terms' postings: every
posting of the query's terms, read as arrays, for less than pruning or the one statement read
of the index.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection
from dataclasses import dataclass

from django.conf import settings
from django.db import connection

from accounts.tenancy import Scope
from mirix_site.search import segments
from mirix_site.search.kinds import SearchableKind
from mirix_site.search.models import DocumentStats, Posting, TermStats

K1 = 1.2
B = 0.75
# Looking postings up by document id costs a few times more per id than reading them in a run:
# ids are looked up only when there are at most this fraction of the term's postings, else the
# term's postings are read and the others skipped here: given many ids, the planner scanned
# the term across every user of the organization (bench/RESULTS.md, bench/retrieval_latency.py).
PROBE_FRACTION = 0.25
# Up to this many postings over the query's terms, the database reads and scores them all in
# one statement; past it the term-by-term pruning below, which reads less, is kept. One
# statement costs less per posting than term by term (bench/experiences.py; bench/RESULTS.md);
# the bound keeps it well inside the search budget where large lists make pruning pay.
SINGLE_STATEMENT_POSTINGS = 10_000
_POSTINGS = Posting._meta.db_table
_TERMS = TermStats._meta.db_table
_DOCUMENTS = DocumentStats._meta.db_table


@dataclass(frozen=True)
class TermInfo:
    lexeme: str
    df: int  # how many documents in scope hold it
    idf: float
    bound: float  # the most this term can add to one document's score


def query_lexemes(text: str, *, less: str = "") -> list[str]:
    """The lexemes of ``text`` as the keyword lane reads it (sorted), but those of ``less``:
    both analysed in one statement."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT lexeme FROM unnest(to_tsvector(%(config)s::regconfig, %(text)s)) "
            "EXCEPT SELECT lexeme FROM unnest(to_tsvector(%(config)s::regconfig, %(less)s)) "
            "ORDER BY lexeme",
            {"config": settings.TEXT_SEARCH_CONFIG, "text": text, "less": less},
        )
        return [row[0] for row in cursor.fetchall()]


def _statistics(
    scope: Scope, kind: SearchableKind, query: str
) -> tuple[int, float, dict[str, tuple[int, int]]]:
    """N, avgdl and {lexeme: (df, max_tf)} over the scope, for each of the query's lexemes
    (df 0 for a lexeme no document holds). One query: the lexemes are analysed where they are
    looked up."""
    where, params = scope.where()
    params |= {"kind": kind.code, "config": settings.TEXT_SEARCH_CONFIG, "query": query}
    in_scope = f"{where} AND kind = %(kind)s"
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT q.lexeme, documents.n, documents.total, "  # noqa: S608
            f"coalesce(term.df, 0), coalesce(term.max_tf, 0) "
            f"FROM unnest(to_tsvector(%(config)s::regconfig, %(query)s)) AS q "
            f"CROSS JOIN (SELECT coalesce(sum(doc_count), 0) AS n, "
            f"coalesce(sum(total_length), 0) AS total "
            f"FROM {_DOCUMENTS} WHERE {in_scope}) AS documents "
            f"CROSS JOIN LATERAL (SELECT sum(doc_frequency) AS df, max(max_tf) AS max_tf "
            f"FROM {_TERMS} WHERE {in_scope} AND lexeme = q.lexeme) AS term "
            f"ORDER BY q.lexeme",
            params,
        )
        rows = cursor.fetchall()
    if not rows:
        return 0, 0.0, {}
    documents, total_length = int(rows[0][1]), float(rows[0][2])
    terms = {lexeme: (int(df), int(max_tf)) for lexeme, _n, _total, df, max_tf in rows}
    average = total_length / documents if documents else 0.0
    return documents, average, terms


def idf(documents: int, document_frequency: int) -> float:
    return math.log(1 + (documents - document_frequency + 0.5) / (document_frequency + 0.5))


def term_weight(tf: int, doc_length: int, average_length: float) -> float:
    return tf * (K1 + 1) / (tf + K1 * (1 - B + B * doc_length / average_length))


def _ids_restriction(params: dict[str, object], column: str, ids: Collection[int] | None) -> str:
    """``AND column = ANY(ids)``, its parameter added to ``params``; nothing for None."""
    if ids is None:
        return ""
    params["only"] = list(ids)
    return f"AND {column} = ANY(%(only)s::bigint[])"


def _postings(
    scope: Scope,
    kind: SearchableKind,
    lexeme: str,
    *,
    only: Collection[int] | None,
) -> list[tuple[int, int, int]]:
    """(document id, tf, doc length) of the lexeme's postings in scope, or of ``only`` those
    ids."""
    where, params = scope.where()
    params |= {"kind": kind.code, "lexeme": lexeme}
    restriction = _ids_restriction(params, "document_id", only)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT document_id, tf, doc_length FROM {_POSTINGS} "  # noqa: S608
            f"WHERE {where} AND kind = %(kind)s AND lexeme = %(lexeme)s "
            f"{restriction}",
            params,
        )
        return cursor.fetchall()


def bm25_search(
    *,
    scope: Scope,
    kind: SearchableKind,
    query: str,
    limit: int,
    allowed_ids: Collection[int] | None = None,
) -> list[tuple[int, float]]:
    """The ``limit`` best (document id, score) for the query, best first (ties: newer first).
    ``allowed_ids`` restricts the result (filters) without changing the statistics."""
    if limit <= 0 or (allowed_ids is not None and not allowed_ids):
        return []
    documents, average, statistics = _statistics(scope, kind, query)
    if not documents:
        return []
    terms = []
    for lexeme, (df, max_tf) in statistics.items():
        if df <= 0:
            continue
        weight = idf(documents, df)
        # tf·(k1+1)/(tf + k1·(1-b+b·dl/avgdl)) grows with tf and shrinks with dl >= tf, so
        # it is largest at tf = dl = max_tf.
        bound = weight * term_weight(max_tf, max_tf, average)
        terms.append(TermInfo(lexeme, df, weight, bound))
    terms.sort(key=lambda term: term.bound, reverse=True)

    # Segments whatever the terms' postings: numpy scores the 10,000 of the one statement's
    # bound in a fraction of its time (bench/RESULTS.md, 2026-12-07 (4)).
    found = segments.covers_in_scope(scope, kind, documents=documents)
    if found.covers:
        return segments.scored(
            scope,
            kind,
            [segments.Term(term.lexeme, term.idf) for term in terms],
            found,
            average=average,
            limit=limit,
            allowed_ids=allowed_ids,
            k1=K1,
            b=B,
        )
    if sum(term.df for term in terms) <= SINGLE_STATEMENT_POSTINGS:
        return _scored_in_one_statement(
            scope, kind, terms, average=average, limit=limit, allowed_ids=allowed_ids
        )
    return _scored_term_by_term(
        scope, kind, terms, average=average, limit=limit, allowed_ids=allowed_ids
    )


def _scored_in_one_statement(
    scope: Scope,
    kind: SearchableKind,
    terms: list[TermInfo],
    *,
    average: float,
    limit: int,
    allowed_ids: Collection[int] | None,
) -> list[tuple[int, float]]:
    """Every posting of the terms read and scored by the database, in one statement."""
    where, params = scope.where("p.")
    params |= {
        "kind": kind.code,
        "lexemes": [term.lexeme for term in terms],
        "idfs": [term.idf for term in terms],
        "k1": K1,
        "b": B,
        "average": average,
        "limit": limit,
    }
    restriction = _ids_restriction(params, "p.document_id", allowed_ids)
    with connection.cursor() as cursor:
        cursor.execute(
            # Summed in the terms' order, as the other path does: equal scores stay equal.
            # The constants as float8: inlined by the client, they would be numeric, whose
            # arithmetic took most of the statement's time.
            f"SELECT p.document_id, sum(q.idf * p.tf * (%(k1)s::float8 + 1) / "  # noqa: S608
            f"(p.tf + %(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * p.doc_length "
            f"/ %(average)s::float8)) ORDER BY q.position) AS score "
            f"FROM {_POSTINGS} AS p "
            f"JOIN unnest(%(lexemes)s::text[], %(idfs)s::float8[]) "
            f"WITH ORDINALITY AS q(lexeme, idf, position) ON q.lexeme = p.lexeme "
            f"WHERE {where} AND p.kind = %(kind)s AND p.lexeme = ANY(%(lexemes)s::text[]) "
            f"{restriction} "
            f"GROUP BY p.document_id ORDER BY score DESC, p.document_id DESC LIMIT %(limit)s",
            params,
        )
        return [(int(document), float(score)) for document, score in cursor.fetchall()]


def _scored_term_by_term(
    scope: Scope,
    kind: SearchableKind,
    terms: list[TermInfo],
    *,
    average: float,
    limit: int,
    allowed_ids: Collection[int] | None,
) -> list[tuple[int, float]]:
    """MaxScore: a statement per term, rare terms first, common ones looked up only for the
    documents that can still reach the top."""
    allowed = set(allowed_ids) if allowed_ids is not None else None
    scores: dict[int, float] = {}
    remaining = sum(term.bound for term in terms)
    for term in terms:
        remaining -= term.bound
        threshold = heapq.nlargest(limit, scores.values())[-1] if len(scores) >= limit else 0.0
        wanted: Collection[int] | None = allowed
        if len(scores) >= limit and term.bound + remaining < threshold:
            # No unseen document can reach the top: score only those that still can.
            scores = {
                doc: score
                for doc, score in scores.items()
                if score + term.bound + remaining >= threshold
            }
            wanted = scores.keys()
        probe = wanted is not None and len(wanted) <= PROBE_FRACTION * term.df
        rows = _postings(scope, kind, term.lexeme, only=list(wanted) if probe else None)
        if wanted is not None and not probe:
            rows = [row for row in rows if row[0] in wanted]
        for document_id, tf, doc_length in rows:
            scores[document_id] = scores.get(document_id, 0.0) + term.idf * term_weight(
                tf, doc_length, average
            )
    best = heapq.nlargest(limit, scores.items(), key=lambda item: (item[1], item[0]))
    return best
