"""The skills' phrasing lane: each candidate skill's learned requests matched one by one.

A skill is searched as one document (name, description, triggers, instructions) and by one
vector fit against its owner's other skills. A task that repeats most of the words of one
request a skill was learned from (a task family's template) can still lose to a skill whose
vector is a little nearer, where plain BM25 over the learned requests one by one (the nearest
request's skill: the keyword floor) finds it. So each candidate the gate kept is matched request
by request too: its best request by BM25 over the candidates' requests, and the share of the
task's weight (the idf of the task's words that some request holds) that request holds. A share
of at least ``SKILL_SEARCH_PHRASING_MIN_SHARE`` adds ``SKILL_SEARCH_PHRASING_WEIGHT`` times it
to the candidate's hybrid score; a lower one nothing, since a paraphrase shares a few words with
many skills' requests and the vector reads it better (an unconditional lane cost MetaTool p@1).
Chosen on the dev halves of WebArena's task families and MetaTool (bench/RESULTS.md,
bench/task_families.py).

The lexemes and idf are the database's text search configuration's and the engine's BM25's, the
statistics those of every candidate's requests. The lane costs one statement, ~9 ms a retrieval
at 20 requests a skill (bench/RESULTS.md).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import connection

from mirix_site.search.bm25 import idf, query_lexemes, term_weight

if TYPE_CHECKING:
    from mirix_site.search.kinds import Hit


@dataclass(frozen=True)
class PhrasingMatch:
    """How well a group's best phrasing matches a query: its BM25 score, and the share of the
    query's weight (the idf of its lexemes that some phrasing holds) it holds."""

    bm25: float = 0.0
    coverage: float = 0.0


def phrasing_matches(query: str, phrasings: Sequence[Sequence[str]]) -> list[PhrasingMatch]:
    """For each group of phrasings, its best phrasing by BM25 over all of them, and that
    phrasing's coverage (``PhrasingMatch``)."""
    lexemes = set(query_lexemes(query))
    texts = [text for group in phrasings for text in group]
    if not lexemes or not texts:
        return [PhrasingMatch()] * len(phrasings)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT d.ord, v.lexeme, coalesce(array_length(v.positions, 1), 1) "
            "FROM unnest(%(texts)s::text[]) WITH ORDINALITY AS d(text, ord), "
            "LATERAL unnest(to_tsvector(%(config)s::regconfig, d.text)) AS v",
            {"texts": texts, "config": settings.TEXT_SEARCH_CONFIG},
        )
        rows = cursor.fetchall()
    lengths: Counter[int] = Counter()
    matched: dict[int, dict[str, int]] = defaultdict(dict)
    frequency: Counter[str] = Counter()
    for ordinal, lexeme, count in rows:
        lengths[ordinal - 1] += count
        if lexeme in lexemes:
            matched[ordinal - 1][lexeme] = count
            frequency[lexeme] += 1
    average = sum(lengths.values()) / len(texts) or 1.0
    weights = {lexeme: idf(len(texts), frequency[lexeme]) for lexeme in frequency}
    whole = sum(weights.values()) or 1.0
    found = []
    index = 0
    for group in phrasings:
        best = PhrasingMatch()
        for position in range(index, index + len(group)):
            terms = matched.get(position, {})
            score = sum(
                weights[lexeme] * term_weight(tf, lengths[position], average)
                for lexeme, tf in terms.items()
            )
            if score > best.bm25:
                best = PhrasingMatch(score, sum(weights[lexeme] for lexeme in terms) / whole)
        found.append(best)
        index += len(group)
    return found


def skill_phrasings_rescore(query: str, hits: Sequence[Hit]) -> None:
    """Add the phrasing lane's share (see the module's docstring) to each hit's score."""
    weight = settings.SKILL_SEARCH_PHRASING_WEIGHT
    if not hits or not weight:
        return
    matches = phrasing_matches(query, [list(hit.row.triggers or ()) for hit in hits])
    for hit, match in zip(hits, matches, strict=True):
        if match.coverage >= settings.SKILL_SEARCH_PHRASING_MIN_SHARE:
            hit.candidate.score += weight * match.coverage
