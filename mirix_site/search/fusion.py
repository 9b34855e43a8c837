"""Fusion of the lanes, then the similarity gate.

The lanes are BM25, the vector lane and, when the query's words name a time, the time lane (the
rows dated in it, ranked as the search's first lane ranks them). A kind fuses them one of two
ways (``SearchableKind.fusion``):

- RRF: each result scores Σ weight/(60 + rank) over the lanes that found it, so a row both lanes
  rank well beats one lane's top. Ranks only: how far BM25's first is ahead of its tenth is lost.
- Scores: each result scores its BM25 score over the lane's best, plus its cosine similarity to
  the query, plus its time-lane BM25 score over that lane's best, each times its lane's weight.
  Where one lane is much the stronger (BM25 on chat memories with all-MiniLM-L6-v2) it keeps
  that lane's margins, and the similarity of every candidate, not only the vector lane's top,
  reorders them (bench/RESULTS.md: better than RRF on both halves of LoCoMo).

The gate then uses the embedding model's calibrated thresholds: below ``min_similarity`` a
result is dropped unless BM25 ranked it in its top 3, overall or within the time named (with
every row tied with the third: a cut inside a tie would be arbitrary), or (fusion by scores)
scored it at least 0.7 of its best: an exact keyword hit the model misses. At or above
``strong_similarity`` it ranks first. A row with no similarity (not yet embedded for the
model: the worker embeds experiences after they are recorded) is judged by BM25 alone: a
keyword lane found it, so it passes, ranked by its keyword ranks only. No BM25 score stands in
for the model's judgement: on the experiences' labelled set no share of BM25's best agreed with
the similarity gate on more than 64% of the keyword hits past the top 3, and every share above
0 dropped rows the gate keeps once they are embedded (bench/RESULTS.md).
A model with no calibration runs with the gate off (and a warning), never with guessed
thresholds.

A kind may ask the gate to fill its lists (``SearchableKind.gate_fill``: memories do): when fewer
than the ``limit`` asked for pass, the dropped candidates a keyword lane scored (they share a
word with the query; the vector lane's alone are, by the calibration, unrelated) follow the kept
ones in fused order up to it (``kept_fill``). The gate cut LongMemEval's lists to about 7
memories where 20 were asked, and the answer was among those cut; the fill only appends, so no
recall at any depth falls (bench/RESULTS.md). Experiences and skills do not fill: a weak match
would count as evidence for recommend, or be served as a skill.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

logger = logging.getLogger(__name__)

# How a kind's lanes may be fused (SearchableKind.fusion, the settings' SEARCH_FUSION).
FUSIONS = ("scores", "rrf")
RRF_K = 60
BM25_RESCUE_RANK = 3
# Under the fusion by scores, a result BM25 scores at least this share of its best passes the
# gate too, whatever its rank: LongMemEval's answers spread over several sessions of one
# subject (chosen on the dev halves with the rank; bench/RESULTS.md).
BM25_RESCUE_SHARE = 0.7


@dataclass
class Candidate:
    document_id: int
    bm25_rank: int | None = None
    bm25_score: float | None = None
    vector_rank: int | None = None
    similarity: float | None = None
    time_rank: int | None = None
    time_score: float | None = None  # the time lane's (BM25's, in a hybrid search)
    score: float = 0.0
    gate: str = "off"


@dataclass(frozen=True)
class Thresholds:
    min_similarity: float
    strong_similarity: float


def _candidates(
    bm25: Sequence[tuple[int, float]],
    vector: Sequence[tuple[int, float]],
    time: Sequence[tuple[int, float]],
    distances: Mapping[int, float],
) -> dict[int, Candidate]:
    """Every row a lane found, with its rank in each and its BM25 score, and its similarity:
    the vector lane's, else from ``distances`` (rows only the keyword lanes found)."""
    candidates: dict[int, Candidate] = {}
    for rank, (document_id, score) in enumerate(bm25, start=1):
        candidate = candidates.setdefault(document_id, Candidate(document_id))
        candidate.bm25_rank, candidate.bm25_score = rank, score
    for rank, (document_id, distance) in enumerate(vector, start=1):
        candidate = candidates.setdefault(document_id, Candidate(document_id))
        candidate.vector_rank, candidate.similarity = rank, 1.0 - distance
    for rank, (document_id, score) in enumerate(time, start=1):
        candidate = candidates.setdefault(document_id, Candidate(document_id))
        candidate.time_rank, candidate.time_score = rank, score
    for candidate in candidates.values():
        if candidate.similarity is None and candidate.document_id in distances:
            candidate.similarity = 1.0 - distances[candidate.document_id]
    return candidates


def _ranked(candidates: dict[int, Candidate]) -> list[Candidate]:
    return sorted(candidates.values(), key=lambda c: (-c.score, -c.document_id))


def rrf_fuse(
    bm25: Sequence[tuple[int, float]],
    vector: Sequence[tuple[int, float]],
    *,
    time: Sequence[tuple[int, float]] = (),
    distances: Mapping[int, float] | None = None,
    k: int = RRF_K,
    bm25_weight: float = 1.0,
    vector_weight: float = 1.0,
    time_weight: float = 1.0,
) -> list[Candidate]:
    """``bm25`` as (id, score) and ``vector`` as (id, cosine distance), each best first;
    ``time`` the time lane's (id, score), best first; ``distances`` as in scores_fuse (read for
    the gate only). Each lane adds weight/(k + rank); equal weights are plain RRF."""
    candidates = _candidates(bm25, vector, time, distances or {})
    for candidate in candidates.values():
        for weight, rank in (
            (bm25_weight, candidate.bm25_rank),
            (vector_weight, candidate.vector_rank),
            (time_weight, candidate.time_rank),
        ):
            if rank is not None:
                candidate.score += weight / (k + rank)
    return _ranked(candidates)


def scores_fuse(
    bm25: Sequence[tuple[int, float]],
    vector: Sequence[tuple[int, float]],
    *,
    distances: Mapping[int, float],
    time: Sequence[tuple[int, float]] = (),
    bm25_weight: float = 1.0,
    vector_weight: float = 1.0,
    time_weight: float = 1.0,
) -> list[Candidate]:
    """``bm25`` and ``time`` as (id, BM25 score) and ``vector`` as (id, cosine distance), each
    best first; ``distances`` the cosine distance of rows only the keyword lanes found (a row
    with none, when the query has no embedding, adds no similarity). Each BM25 lane's scores
    are divided by its best, so that they weigh alike whatever the query's words."""
    candidates = _candidates(bm25, vector, time, distances)
    for lane, weight in ((bm25, bm25_weight), (time, time_weight)):
        for document_id, score in lane:
            candidates[document_id].score += weight * score / (lane[0][1] or 1.0)
    for candidate in candidates.values():
        if candidate.similarity is not None:
            candidate.score += vector_weight * candidate.similarity
    return _ranked(candidates)


def lanes_fuse(
    fusion: str,
    bm25: Sequence[tuple[int, float]],
    vector: Sequence[tuple[int, float]],
    *,
    time: Sequence[tuple[int, float]],
    distances: Mapping[int, float],
    bm25_weight: float,
    vector_weight: float,
    time_weight: float,
) -> list[Candidate]:
    """The lanes fused as ``fusion`` (one of FUSIONS) says, each candidate with its
    similarity where known."""
    if fusion == "scores":
        return scores_fuse(
            bm25,
            vector,
            distances=distances,
            time=time,
            bm25_weight=bm25_weight,
            vector_weight=vector_weight,
            time_weight=time_weight,
        )
    return rrf_fuse(
        bm25,
        vector,
        time=time,
        distances=distances,
        bm25_weight=bm25_weight,
        vector_weight=vector_weight,
        time_weight=time_weight,
    )


def _cut(scores: Sequence[float | None]) -> float | None:
    """The score at the lane's BM25_RESCUE_RANK-th place (its last, when it holds fewer)."""
    ordered = sorted((score for score in scores if score is not None), reverse=True)
    return ordered[min(BM25_RESCUE_RANK, len(ordered)) - 1] if ordered else None


def _at_or_above(score: float | None, cut: float | None) -> bool:
    # The same text scores the same, summed in whatever order the lane summed it.
    return (
        score is not None
        and cut is not None
        and (score >= cut or math.isclose(score, cut, rel_tol=1e-9))
    )


def gate_apply(
    candidates: list[Candidate], thresholds: Thresholds | None, *, fusion: str, fill: int = 0
) -> list[Candidate]:
    """Mark each candidate's gate decision; return the kept ones, strong first, in order.
    Fused by ``scores``, a result whose BM25 score is at least BM25_RESCUE_SHARE of the best
    one's is rescued too (that fusion's own measure of keyword evidence). With ``fill``, fewer
    kept than that are followed by the dropped candidates a keyword lane scored, in order, up
    to it."""
    if thresholds is None:
        for candidate in candidates:
            candidate.gate = "off"
        return candidates
    best = max((c.bm25_score for c in candidates if c.bm25_score is not None), default=None)
    share_floor = BM25_RESCUE_SHARE * best if fusion == "scores" and best else None
    bm25_cut = _cut([c.bm25_score for c in candidates])
    time_cut = _cut([c.time_score for c in candidates])
    strong, kept = [], []
    for candidate in candidates:
        similarity = candidate.similarity if candidate.similarity is not None else -1.0
        rescued = any(
            rank is not None and rank <= BM25_RESCUE_RANK
            for rank in (candidate.bm25_rank, candidate.time_rank)
        ) or (
            _at_or_above(candidate.bm25_score, bm25_cut)
            or _at_or_above(candidate.time_score, time_cut)
        )
        scored = (
            share_floor is not None
            and candidate.bm25_score is not None
            and candidate.bm25_score >= share_floor
        )
        if similarity >= thresholds.strong_similarity:
            candidate.gate = "strong"
            strong.append(candidate)
        elif similarity >= thresholds.min_similarity:
            candidate.gate = "kept"
            kept.append(candidate)
        elif rescued:
            candidate.gate = "kept_bm25_top3"
            kept.append(candidate)
        elif scored:
            candidate.gate = "kept_bm25_score"
            kept.append(candidate)
        elif candidate.similarity is None and (
            candidate.bm25_rank is not None or candidate.time_rank is not None
        ):
            candidate.gate = "kept_unembedded"
            kept.append(candidate)
        else:
            candidate.gate = "dropped"
    chosen = strong + kept
    for candidate in candidates:
        if len(chosen) >= fill:
            break
        if candidate.gate == "dropped" and (candidate.bm25_score or candidate.time_score):
            candidate.gate = "kept_fill"
            chosen.append(candidate)
    return chosen
