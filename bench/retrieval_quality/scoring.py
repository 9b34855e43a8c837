"""The retrieval-quality bench's searches and scores: every question asked once per search
lane, its results turned into a ranked list of units, recall_any / recall_all @k and nDCG@10
against its gold, and the reference, plain BM25 computed here on the same questions. See steps
3 to 5 of ``__main__``'s docstring."""

from __future__ import annotations

import http.client
import math
import statistics
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlencode

from bench.common import (
    RATE_LIMIT_HINT,
    BenchError,
    KeepAliveClient,
    percentile,
    reference_tokens,
)
from bench.retrieval_quality.datasets import Dataset, Haystack, Question, _questions_to_ask
from bench.retrieval_quality.ingest import (
    Clients,
    Provenance,
    TurnRef,
    _in_parallel,
    _search_available,
)

METHODS = ("bm25", "embedding", "hybrid")
# The gate decision of a result added to fill a short list (mirix_site.search.fusion), and the
# name of a run scored without them.
FILL_GATE = "kept_fill"
UNFILLED_SUFFIX = "-nofill"
CUTOFFS = (1, 5, 10, 20)
NDCG_CUTOFF = 10
REFERENCE = "reference"
WARMUP_SEARCHES = 2  # per thread and lane


# --- Searching and scoring -----------------------------------------------------------------------


@dataclass
class Answer:
    """One search: the units it ranked, how many memories it returned and with which gate
    decision (``hybrid`` drops results below the calibrated similarity)."""

    question: Question
    ranked: list[str]
    latency_ms: float
    error: str | None = None
    results: int = 0
    turns: list[str] = field(default_factory=list)
    gates: dict[str, int] = field(default_factory=dict)
    # The units of the results the gate kept without its fill (kept_fill), when it filled.
    unfilled: list[str] | None = None


Gold = dict[str, frozenset[str]]  # question id -> gold units


def gold_of(questions: Iterable[Question]) -> Gold:
    return {question.question_id: question.gold for question in questions}


def ranked_units(results: list[Any], refs: dict[str, TurnRef]) -> tuple[list[str], list[str], int]:
    """Unique units in result order, each result expanded to its turns in message order; the
    turns themselves (LoCoMo dia_id, LongMemEval session#turn index) in that order; and how many
    cited message ids are not bench turns."""
    ranked: list[str] = []
    seen: set[str] = set()
    turn_keys: dict[str, None] = {}
    unknown = 0
    for result in results:
        turns = []
        for message_id in (
            result.get("source_message_ids") if isinstance(result, dict) else None
        ) or []:
            ref = refs.get(str(message_id))
            if ref is None:
                unknown += 1
            else:
                turns.append(ref)
        for ref in sorted(turns, key=lambda turn: turn.order):
            turn_keys.setdefault(ref.turn_key)
            if ref.unit not in seen:
                seen.add(ref.unit)
                ranked.append(ref.unit)
    return ranked, list(turn_keys), unknown


def question_scores(ranked: Sequence[str], gold: frozenset[str]) -> dict[str, float]:
    scores: dict[str, float] = {}
    for cutoff in CUTOFFS:
        top = set(ranked[:cutoff])
        scores[f"recall_any@{cutoff}"] = float(bool(gold & top))
        scores[f"recall_all@{cutoff}"] = float(gold <= top)
    gains = sum(
        1 / math.log2(rank + 2) for rank, unit in enumerate(ranked[:NDCG_CUTOFF]) if unit in gold
    )
    ideal = sum(1 / math.log2(rank + 2) for rank in range(min(len(gold), NDCG_CUTOFF)))
    scores[f"ndcg@{NDCG_CUTOFF}"] = gains / ideal if ideal else 0.0
    return scores


def mean_scores(answers: Iterable[Answer], gold: Gold) -> dict[str, float]:
    """Mean of every per-question score over the answers to the questions ``gold`` names,
    scored against that gold; ``questions`` is how many."""
    rows = [
        question_scores(answer.ranked, gold[answer.question.question_id])
        for answer in answers
        if answer.question.question_id in gold
    ]
    means: dict[str, float] = {"questions": len(rows)}
    names = question_scores([], frozenset({"-"})).keys()
    for name in names:
        means[name] = round(statistics.fmean(row[name] for row in rows), 4) if rows else math.nan
    return means


@dataclass
class MethodRun:
    """Every question of a dataset asked with one search_method."""

    method: str
    answers: list[Answer]
    unknown_source_ids: int

    @property
    def errors(self) -> dict[str, int]:
        counted: dict[str, int] = {}
        for answer in self.answers:
            if answer.error:
                counted[answer.error] = counted.get(answer.error, 0) + 1
        return counted

    def latency(self, fraction: float) -> float:
        return percentile([answer.latency_ms for answer in self.answers], fraction)

    def shape(self) -> dict[str, Any]:
        """Mean memories and units per answered search, and the gate decisions seen."""
        answered = [answer for answer in self.answers if not answer.error]
        gates: dict[str, int] = {}
        for answer in answered:
            for gate, count in answer.gates.items():
                gates[gate] = gates.get(gate, 0) + count
        return {
            "mean_results": round(statistics.fmean(a.results for a in answered), 1)
            if answered
            else 0.0,
            "mean_ranked_units": round(statistics.fmean(len(a.ranked) for a in answered), 1)
            if answered
            else 0.0,
            # Fewer units than the deepest cutoff: recall@20 (or less) is capped by the limit.
            "short_lists": sum(1 for answer in answered if len(answer.ranked) < max(CUTOFFS)),
            "gates": gates,
        }


class SearchMissingError(Exception):
    pass


_SEARCH_MISSING = (
    "GET /memory/search does not exist on this server yet (404, and not in /api/schema/). "
    "The ingest is kept: once the endpoint exists, restart the server and run again with "
    "--skip-ingest --run-id {run_id} (and the same --dataset / --limit-questions)."
)


def _search(
    client: KeepAliveClient,
    question: Question,
    *,
    method: str,
    memory_type: str,
    limit: int,
    refs: dict[str, TurnRef],
) -> tuple[Answer, int]:
    params: dict[str, object] = {
        "user_id": question.user_id,
        "query": question.text,
        "memory_type": memory_type,
        "search_method": method,
        "limit": limit,
    }
    if question.asked_at:
        params |= {"temporal": "true", "as_of": question.asked_at}
    query = urlencode(params)
    began = time.perf_counter()
    try:
        status, payload = client.request("GET", f"/memory/search?{query}")
    except (OSError, http.client.HTTPException) as error:
        client.close()
        elapsed = (time.perf_counter() - began) * 1000
        return Answer(question, [], elapsed, error=type(error).__name__), 0
    elapsed = (time.perf_counter() - began) * 1000
    if status == 429:
        raise BenchError(RATE_LIMIT_HINT)
    results = payload.get("results") if isinstance(payload, dict) else None
    if status != 200 or not isinstance(results, list):
        code = payload.get("code") if isinstance(payload, dict) else None
        return Answer(question, [], elapsed, error=f"{status} {code or ''}".strip()), 0
    ranked, turns, unknown = ranked_units(results, refs)
    gates: dict[str, int] = {}
    for result in results:
        gate = str(result.get("gate")) if isinstance(result, dict) else "?"
        gates[gate] = gates.get(gate, 0) + 1
    answer = Answer(question, ranked, elapsed, results=len(results), turns=turns, gates=gates)
    if gates.get(FILL_GATE):
        kept = [r for r in results if isinstance(r, dict) and r.get("gate") != FILL_GATE]
        answer.unfilled = ranked_units(kept, refs)[0]
    return answer, unknown


def unfilled_run(run: MethodRun) -> MethodRun | None:
    """The same searches as the gate alone would have answered them: every result the fill
    added left out (None: it added none). Side by side in one run, on the same ingest."""
    if not any(answer.unfilled is not None for answer in run.answers):
        return None
    answers = [
        replace(answer, ranked=answer.unfilled, gates={}) if answer.unfilled is not None else answer
        for answer in run.answers
    ]
    return MethodRun(f"{run.method}{UNFILLED_SUFFIX}", answers, run.unknown_source_ids)


def _run_method(
    *,
    clients: Clients,
    pool: ThreadPoolExecutor,
    threads: int,
    questions: list[Question],
    provenance: Provenance,
    method: str,
    memory_type: str,
    limit: int,
) -> MethodRun:
    def ask(question: Question) -> tuple[Answer, int]:
        return _search(
            clients.get(),
            question,
            method=method,
            memory_type=memory_type,
            limit=limit,
            refs=provenance[question.user_id],
        )

    # Not measured: each gunicorn worker loads the query embedder on its first search.
    warmup = [questions[index % len(questions)] for index in range(WARMUP_SEARCHES * threads)]
    for answer, _unknown in _in_parallel(pool, ask, warmup):
        if answer.error == "404 not_found" and not _search_available(clients.get()):
            raise SearchMissingError
    outcomes = _in_parallel(
        pool, ask, questions, lambda done: f"  {method}: {done} of {len(questions)} asked"
    )
    return MethodRun(
        method=method,
        answers=[answer for answer, _unknown in outcomes],
        unknown_source_ids=sum(unknown for _answer, unknown in outcomes),
    )


# --- The reference: plain BM25, computed here ----------------------------------------------------

REFERENCE_K1, REFERENCE_B = 1.5, 0.75
REFERENCE_RULE = (
    "Okapi BM25 (k1 1.5, b 0.75, idf ln(1 + (N - df + 0.5) / (df + 0.5))) over each user's "
    "documents, lower case, tokens runs of letters/digits, NLTK English stop words dropped; "
    "LoCoMo: one document per turn, '<speaker>: <text>'; LongMemEval: one per haystack "
    "session, its user turns"
)


def reference_documents(dataset: Dataset, haystack: Haystack) -> list[tuple[str, str]]:
    """(unit, text) for each document of a user's reference corpus. LoCoMo: each turn, as
    ``"<speaker>: <text>"``; LongMemEval: each haystack session, its user turns concatenated
    (the official retrieval rule)."""
    if dataset.unit == "turn":
        return [
            (unit, f"{speaker}: {message['content']}")
            for session in haystack.sessions
            for message, speaker, unit in zip(
                session.messages, session.speakers, session.units, strict=True
            )
        ]
    return [
        (
            session.units[0],
            "\n".join(m["content"] for m in session.messages if m["role"] == "user"),
        )
        for session in haystack.sessions
        if session.units
    ]


class ReferenceIndex:
    """Okapi BM25 over one user's documents (REFERENCE_RULE): IDF and average length over them,
    each distinct query term counted once, as the server's BM25 does."""

    def __init__(self, documents: list[tuple[str, str]]) -> None:
        self.units = [unit for unit, _text in documents]
        self.postings: dict[str, list[tuple[int, int]]] = {}
        self.lengths: list[int] = []
        for index, (_unit, text) in enumerate(documents):
            counts: dict[str, int] = {}
            for token in reference_tokens(text):
                counts[token] = counts.get(token, 0) + 1
            for term, count in counts.items():
                self.postings.setdefault(term, []).append((index, count))
            self.lengths.append(sum(counts.values()))
        self.average_length = statistics.fmean(self.lengths) if self.lengths else 0.0

    def ranked(self, query: str) -> list[str]:
        """Every unit, best first; equal scores (no query term at all among them) in the
        haystack's order."""
        scores = [0.0] * len(self.units)
        total = len(self.units)
        for term in set(reference_tokens(query)):
            postings = self.postings.get(term, [])
            idf = math.log(1 + (total - len(postings) + 0.5) / (len(postings) + 0.5))
            for index, tf in postings:
                norm = 1 - REFERENCE_B + REFERENCE_B * self.lengths[index] / self.average_length
                scores[index] += idf * tf * (REFERENCE_K1 + 1) / (tf + REFERENCE_K1 * norm)
        order = sorted(range(total), key=lambda index: (-scores[index], index))
        return list(dict.fromkeys(self.units[index] for index in order))


def reference_run(dataset: Dataset) -> MethodRun:
    """Every question of the dataset answered by the reference, over the haystacks the server
    is told (a smoke run's trimmed ones too)."""
    indexes = {
        haystack.user_id: ReferenceIndex(reference_documents(dataset, haystack))
        for haystack in dataset.haystacks
    }
    answers = [
        Answer(question, indexes[question.user_id].ranked(question.text), latency_ms=0.0)
        for question in _questions_to_ask(dataset)
    ]
    return MethodRun(method=REFERENCE, answers=answers, unknown_source_ids=0)
