"""Retrieval quality: does ``GET /memory/search`` find the turns (LoCoMo) and the sessions
(LongMemEval-S) that hold a question's answer? No LLM in the loop: both benchmarks name their
evidence, and every memory names the messages it came from (``source_message_ids``).

Held-out halves (``--split``, default test): LoCoMo conversations 1-5 in file order are dev and
6-10 test; LongMemEval-S ``longmemeval_s_cleaned_sample60`` is dev and ``..._more100`` test. A
rule, weight or threshold is chosen on dev and reported on test unchanged: a figure bought by
reading one half's failures must hold on the other (bench-data/README.md).

1. Ingest, through the real path: one end user per LoCoMo conversation
   (``rq-<run>-locomo-<sample_id>``) and per LongMemEval question (``rq-<run>-lme-<question_id>``;
   ``rq-<run>-turns-...`` in the turns pattern). A LoCoMo turn's text is ``text`` plus
   `` [image: <blip_caption>]`` when it has one. ``--client-pattern`` says how a client adds:
   - ``session`` (default): one ``POST /memory/add`` per haystack session, with its session_id
     and its date as ``occurred_at``. LoCoMo's speaker_a speaks as role ``user`` and speaker_b as
     ``assistant``, each with its ``name``; LongMemEval turns keep their own role and content.
   - ``turns``: as the published MIRIX client sends a conversation, one add per turn and no
     session_id (the server files them in the user's default conversation), every turn role
     ``user`` with its speaker in the text, ``"<speaker>: <text>"`` (LoCoMo: the speaker's name;
     LongMemEval: the turn's own role, ``"assistant: ..."``), ``occurred_at`` its haystack
     session's date, and ``filter_tags`` ``{"session": <the session pattern's session_id>}``.
   The ids ``/memory/add`` returns map every message back to its LoCoMo ``dia_id`` or its
   LongMemEval (session id, turn index). A user's adds go in order through one thread;
   ``--threads`` users at a time.
2. Wait until the Celery worker has processed everything. Session pattern: every message of every
   bench session, read back with ``GET /sessions/{id}/messages``, is no longer ``pending``.
   Turns pattern: the default conversation's messages cannot be read back (that route names a
   session by its session_id, and it has none), so a turn counts as processed once a memory cites
   it, as the deterministic extractor does for every turn; ``--skip-ingest`` then reads the
   turns' ids from those citations (see _turns_provenance_read). Then count the turns that some
   memory cites (a turn no memory cites can never be found).
3. Ask every question with ``GET /memory/search?memory_type=episodic`` once per ``--methods``
   lane (bm25, embedding, hybrid), all against the same ingest; a LongMemEval question also
   sends ``temporal=true`` and its ``question_date`` as ``as_of``, so that a time phrase in it
   ("a week ago") favours the episodes of that time, read from the day it is asked (a LoCoMo
   question sends neither, as the MIRIX client does: the dates it names, "on 1 February,
   2023", are read by the server's default); ``limit`` 20 for LoCoMo and 100 for LongMemEval,
   so that every list reaches 20 units (see SEARCH_LIMITS). Episodic memories hold every turn;
   ``--memory-type all`` adds the resource and knowledge-vault items, which cite single turns
   and, on LongMemEval, pushed episodic hits down (hybrid nDCG@10 0.95 -> 0.88 on 12
   questions) while their per-type limit made the lists longer.
4. Score. A question's results become a ranked list of unique units (LoCoMo: turns; LongMemEval:
   sessions): walk the results best first, expand each to the turns its ``source_message_ids``
   name (in message order), append the units not seen yet. Per question, with G the gold units:
   ``recall_any@k`` = some unit of G among the first k, ``recall_all@k`` = all of G among the
   first k (k = 1, 5, 10, 20), ``ndcg@10`` = DCG of binary gains over the first 10 divided by the
   DCG of min(|G|, 10) hits. Figures are means over questions, overall and per category (LoCoMo
   category number; LongMemEval question_type). A search that answers an error counts as a miss.
   - LoCoMo gold: the ``evidence`` dia_ids, split on ``;`` and white space, stray colons dropped,
     leading zeros stripped; refs naming no turn of the conversation are skipped (counted).
     Category 5 (adversarial) is included, and the overall figures are also shown without it.
   - LongMemEval gold (the README's rules, from the official retrieval script): abstention
     questions (``_abs``) are dropped; a gold session none of whose user turns is marked
     ``has_answer`` is not gold. A question left with no gold session (most single-session-
     assistant ones: their evidence is in assistant turns) is not scored and is counted; the
     official script would score it recall_any 0 whatever was retrieved. One more line scores
     all ``answer_session_ids`` as gold, to show what the rule leaves out. A haystack that holds
     one session twice gets two server sessions, both scored as that session.
5. The reference: plain BM25 computed here, no server, over the haystacks the server was told
   (a smoke run's trimmed ones too), on the same questions, units and metrics; a row
   ``reference`` in every table. Okapi BM25, k1 1.5, b 0.75, idf ln(1 + (N - df + 0.5) / (df +
   0.5)), IDF and average length over one bench user's documents; lower case, tokens are runs
   of letters and digits, NLTK's English stop words dropped (STOP_WORDS). A LoCoMo document is
   one turn, ``"<speaker>: <text>"`` with its image caption, unit its dia_id; a LongMemEval
   document is one haystack session, its user turns concatenated (the official retrieval rule).
   Every unit is ranked, ties in haystack order. It reproduces bench-data/README.md's figures
   (LongMemEval-S recall_any@5 0.918 dev, 0.989 test); a server that indexes the same turns
   should not rank them worse than this.

Goals: LoCoMo turn-level recall_any@10 >= 0.80; LongMemEval-S session recall_any@5 >= 0.97;
and hybrid never below the reference on those metrics (each lane's verdict is printed, and
the categories where hybrid is below it). Search latency p50/p95 is measured by the client
under ``--threads`` concurrent searches, after a few warm-up searches per lane.

Data: ``../shared/bench-data`` (see its README). Run against a live server started with the rate
limit raised (one key sends everything):

    API_RATE_LIMIT=10000000/min make run
    .venv/bin/python -m bench.retrieval_quality [--base-url URL] [--api-key KEY]
        [--dataset locomo|longmemeval|both] [--split dev|test] [--client-pattern session|turns]
        [--methods bm25,embedding,hybrid] [--limit-questions N] [--skip-ingest --run-id RUN]
        [--json-out FILE] [--smoke]

``--smoke`` asks 2 questions per dataset (unless ``--limit-questions``) and tells each user only
the sessions that hold its questions' gold units, then its first others, 3 sessions in all
(``SMOKE_SESSIONS``; more when the gold needs more), in either pattern; the reference reads the
same trimmed haystacks. The turns pattern sends one request per turn (LongMemEval-S test: 45,817
adds instead of 4,431): its ingest is much slower than the session pattern's.
"""

from __future__ import annotations

import argparse
import calendar
import gzip
import http.client
import json
import math
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

from bench.common import (
    DROPPED,
    PROGRESS_EVERY_SECONDS,
    PROJECT_DIR,
    RATE_LIMIT_HINT,
    SMOKE_NOTE,
    BenchError,
    KeepAliveClient,
    api_key_read,
    arguments_parse,
    percentile,
    server_arguments,
    verdict,
)

DEFAULT_DATA_DIR = PROJECT_DIR.parent / "shared" / "bench-data"
LOCOMO_FILE = Path("locomo") / "locomo10.json"
LONGMEMEVAL_FILE = Path("longmemeval") / "longmemeval_s_cleaned_sample60.json.gz"
# Held-out halves (bench-data/README.md): every rule, weight and threshold is chosen on dev, and
# test is reported without changing anything. LoCoMo: its first conversations in file order are
# dev, the rest test; LongMemEval-S: one file each.
SPLITS = ("dev", "test")
# How the bench's client adds a haystack: one add per session (with its session_id), or one per
# turn with no session_id, as the published MIRIX client sends them (see _turn_adds).
CLIENT_PATTERNS = ("session", "turns")
LOCOMO_DEV_CONVERSATIONS = 5
LONGMEMEVAL_FILES = {
    "dev": LONGMEMEVAL_FILE,
    "test": Path("longmemeval") / "longmemeval_s_cleaned_more100.json.gz",
}

METHODS = ("bm25", "embedding", "hybrid")
CUTOFFS = (1, 5, 10, 20)
NDCG_CUTOFF = 10
LOCOMO_GOAL = ("recall_any@10", 0.80)
LONGMEMEVAL_GOAL = ("recall_any@5", 0.97)
REFERENCE = "reference"
LOCOMO_CATEGORIES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
ADVERSARIAL = "5 adversarial"

SESSION_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9_.@:+-]{1,100}$")
WARMUP_SEARCHES = 2  # per thread and lane
# Memories asked per search. recall@k counts the first k distinct units, so a search must return
# at least 20 of them (LongMemEval's own turn-to-session scoring likewise reads on until it has
# k distinct sessions). A LoCoMo episodic memory is one exchange, so 20 memories hold about 40
# turns; a LongMemEval session holds about 10 exchanges, and 20 memories measured 8-10 distinct
# sessions, so those searches ask for the API's maximum. The first results do not depend on the
# limit, except through hybrid's over-fetch (each lane fetches 4 x limit before fusion).
SEARCH_LIMITS = {"locomo": 20, "longmemeval": 100}
SMOKE = {"limit_questions": 2, "threads": 2, "poll_interval": 0.5, "stall_seconds": 60.0}
SMOKE_SESSIONS = 3

Item = TypeVar("Item")
Outcome = TypeVar("Outcome")


# --- The benchmark's data -------------------------------------------------------------------------


@dataclass
class SessionPlan:
    """A haystack session: its turns as one add sends them, and per turn who said it (LoCoMo:
    the speaker's name; LongMemEval: the turn's role), the unit it scores as (LoCoMo dia_id,
    LongMemEval original session id) and a readable key (dia_id, or session id#turn index)."""

    session_id: str
    occurred_at: str | None
    messages: list[dict[str, str]]
    speakers: list[str]
    units: list[str]
    turn_keys: list[str]


@dataclass
class Haystack:
    """What one bench end user is told: a LoCoMo conversation or a LongMemEval haystack."""

    user_id: str
    sessions: list[SessionPlan]

    @property
    def message_count(self) -> int:
        return sum(len(session.messages) for session in self.sessions)


@dataclass(frozen=True)
class Question:
    """One question asked of one bench user, with the units (turns or sessions) that answer it."""

    question_id: str
    user_id: str
    text: str
    category: str
    gold: frozenset[str]
    # When the question is asked (LongMemEval's question_date): the search then reads a time
    # phrase in it ("a week ago") from that moment (``temporal=true&as_of=``). LoCoMo names none.
    asked_at: str | None = None


@dataclass
class Dataset:
    """One benchmark, ready to ingest and ask: its users' haystacks and its scored questions."""

    name: str
    title: str
    split: str
    client_pattern: str
    unit: str
    haystacks: list[Haystack]
    questions: list[Question]
    goal: tuple[str, float]
    per_category_metric: str
    # Memories per search: enough for max(CUTOFFS) units (see SEARCH_LIMITS).
    search_limit: int
    notes: list[str] = field(default_factory=list)
    # Extra scorings of the same answers under another gold (label -> questions).
    variants: dict[str, list[Question]] = field(default_factory=dict)
    undated_sessions: int = 0


_LOCOMO_DATE = re.compile(
    r"(\d{1,2}):(\d{2})\s*([ap])\.?\s*m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})",
    re.IGNORECASE,
)
_LONGMEMEVAL_DATE = re.compile(
    r"(\d{4})/(\d{1,2})/(\d{1,2})(?:\s*\([A-Za-z]+\))?\s+(\d{1,2}):(\d{2})"
)
_MONTHS = {name.lower(): number for number, name in enumerate(calendar.month_abbr) if name}


def _iso(year: int, month: int, day: int, hour: int, minute: int) -> str | None:
    try:
        moment = datetime(year, month, day, hour, minute, tzinfo=UTC)
    except ValueError:
        return None
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def locomo_date_parse(text: str) -> str | None:
    """``"1:56 pm on 8 May, 2023"`` -> ``"2023-05-08T13:56:00Z"``; None when unreadable."""
    match = _LOCOMO_DATE.search(text or "")
    if match is None:
        return None
    hour, minute, half, day, month_name, year = match.groups()
    month = _MONTHS.get(month_name[:3].lower())
    if month is None:
        return None
    hour_24 = int(hour) % 12 + (12 if half.lower() == "p" else 0)
    return _iso(int(year), month, int(day), hour_24, int(minute))


def longmemeval_date_parse(text: str) -> str | None:
    """``"2023/05/20 (Sat) 02:21"`` -> ``"2023-05-20T02:21:00Z"``; None when unreadable."""
    match = _LONGMEMEVAL_DATE.search(text or "")
    if match is None:
        return None
    year, month, day, hour, minute = (int(group) for group in match.groups())
    return _iso(year, month, day, hour, minute)


_EVIDENCE = re.compile(r"^D:?0*(\d+):+0*(\d+)$")


def locomo_evidence_parse(refs: Iterable[str]) -> tuple[list[str], list[str]]:
    """Normalized dia_ids and the refs that are not one (``'D8:6; D9:17'`` holds two,
    ``'D:11:26'`` is D11:26, ``'D30:05'`` is D30:5, ``'D'`` is nothing)."""
    found, malformed = [], []
    for ref in refs:
        for token in re.split(r"[;\s]+", ref.strip()):
            if not token:
                continue
            match = _EVIDENCE.match(token)
            if match is None:
                malformed.append(token)
            else:
                found.append(f"D{int(match.group(1))}:{int(match.group(2))}")
    return found, malformed


def _locomo_turn_text(turn: dict[str, Any]) -> str:
    text = turn.get("text") or ""
    caption = turn.get("blip_caption")
    return f"{text} [image: {caption}]" if caption else text


def _user_prefix(run_id: str, client_pattern: str) -> str:
    """``rq-<run>``, and ``rq-<run>-turns`` for the turns pattern: a run's users hold one
    pattern's ingest, never both."""
    return f"rq-{run_id}" if client_pattern == "session" else f"rq-{run_id}-{client_pattern}"


def locomo_split(conversations: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    """The conversations of a split: dev the first LOCOMO_DEV_CONVERSATIONS in file order
    (1-5 of 10), test the rest."""
    dev, test = conversations[:LOCOMO_DEV_CONVERSATIONS], conversations[LOCOMO_DEV_CONVERSATIONS:]
    return {"dev": dev, "test": test}[split]


def locomo_load(
    path: Path, *, run_id: str, limit: int | None, split: str, client_pattern: str = "session"
) -> Dataset:
    conversations = locomo_split(json.loads(path.read_text()), split)
    selected: list[tuple[dict[str, Any], int, dict[str, Any]]] = []
    for conversation in conversations:
        selected.extend((conversation, index, qa) for index, qa in enumerate(conversation["qa"]))
    if limit is not None:
        selected = selected[:limit]
    wanted = {conversation["sample_id"] for conversation, _index, _qa in selected}
    haystacks: dict[str, Haystack] = {}
    undated = 0
    for conversation in conversations:
        if conversation["sample_id"] not in wanted:
            continue
        haystack, missing_dates = _locomo_haystack(
            conversation, users=_user_prefix(run_id, client_pattern)
        )
        haystacks[conversation["sample_id"]] = haystack
        undated += missing_dates

    questions, unresolved, unanswerable = [], 0, 0
    for conversation, index, qa in selected:
        haystack = haystacks[conversation["sample_id"]]
        known = {unit for session in haystack.sessions for unit in session.units}
        dia_ids, malformed = locomo_evidence_parse(qa.get("evidence") or [])
        gold = frozenset(dia_id for dia_id in dia_ids if dia_id in known)
        unresolved += len(malformed) + sum(1 for dia_id in dia_ids if dia_id not in known)
        if not gold:
            unanswerable += 1
            continue
        category = int(qa["category"])
        questions.append(
            Question(
                question_id=f"{conversation['sample_id']}#{index}",
                user_id=haystack.user_id,
                text=qa["question"],
                category=f"{category} {LOCOMO_CATEGORIES.get(category, '?')}",
                gold=gold,
            )
        )
    return Dataset(
        name="locomo",
        title="LoCoMo",
        split=split,
        client_pattern=client_pattern,
        unit="turn",
        haystacks=list(haystacks.values()),
        questions=questions,
        goal=LOCOMO_GOAL,
        per_category_metric="recall_any@10",
        search_limit=SEARCH_LIMITS["locomo"],
        notes=[
            f"evidence refs skipped as unresolvable: {unresolved}; "
            f"questions with no resolvable evidence (not scored): {unanswerable}"
        ],
        undated_sessions=undated,
    )


def _locomo_haystack(conversation: dict[str, Any], *, users: str) -> tuple[Haystack, int]:
    speakers = conversation["conversation"]
    roles = {speakers["speaker_a"]: "user", speakers["speaker_b"]: "assistant"}
    numbers = sorted(
        int(key.split("_")[1])
        for key in speakers
        if re.fullmatch(r"session_\d+", key) and speakers[key]
    )
    sessions, undated = [], 0
    for number in numbers:
        turns = speakers[f"session_{number}"]
        occurred_at = locomo_date_parse(speakers.get(f"session_{number}_date_time", ""))
        undated += occurred_at is None
        sessions.append(
            SessionPlan(
                session_id=f"session_{number}",
                occurred_at=occurred_at,
                messages=[
                    {
                        "role": roles[turn["speaker"]],
                        "name": turn["speaker"],
                        "content": _locomo_turn_text(turn),
                    }
                    for turn in turns
                ],
                speakers=[turn["speaker"] for turn in turns],
                units=[locomo_evidence_parse([turn["dia_id"]])[0][0] for turn in turns],
                turn_keys=[turn["dia_id"] for turn in turns],
            )
        )
    user_id = f"{users}-locomo-{conversation['sample_id']}"
    return Haystack(user_id=user_id, sessions=sessions), undated


def longmemeval_load(
    path: Path,
    *,
    run_id: str,
    limit: int | None,
    split: str = "dev",
    client_pattern: str = "session",
) -> Dataset:
    """The questions of one LongMemEval-S file; ``split`` names the half it is
    (LONGMEMEVAL_FILES)."""
    with gzip.open(path, "rt") as handle:
        entries = [
            entry for entry in json.load(handle) if not entry["question_id"].endswith("_abs")
        ]
    if limit is not None:
        entries = _round_robin(entries, key="question_type")[:limit]
    haystacks, questions, lenient, undated = [], [], [], 0
    without_gold: dict[str, int] = {}
    for entry in entries:
        haystack, missing_dates = _longmemeval_haystack(
            entry, users=_user_prefix(run_id, client_pattern)
        )
        haystacks.append(haystack)
        undated += missing_dates
        by_id = dict(zip(entry["haystack_session_ids"], entry["haystack_sessions"], strict=True))
        gold = frozenset(
            session_id
            for session_id in entry["answer_session_ids"]
            if any(
                turn["role"] == "user" and turn.get("has_answer")
                for turn in by_id.get(session_id, [])
            )
        )
        common = {
            "question_id": entry["question_id"],
            "user_id": haystack.user_id,
            "text": entry["question"],
            "category": entry["question_type"],
            "asked_at": longmemeval_date_parse(entry.get("question_date") or ""),
        }
        lenient.append(
            Question(**common, gold=frozenset(entry["answer_session_ids"]) & by_id.keys())
        )
        if gold:
            questions.append(Question(**common, gold=gold))
        else:
            without_gold[entry["question_type"]] = without_gold.get(entry["question_type"], 0) + 1
    skipped = ", ".join(f"{kind} {count}" for kind, count in sorted(without_gold.items()))
    return Dataset(
        name="longmemeval",
        title="LongMemEval-S",
        split=split,
        client_pattern=client_pattern,
        unit="session",
        haystacks=haystacks,
        questions=questions,
        goal=LONGMEMEVAL_GOAL,
        per_category_metric="recall_any@5",
        search_limit=SEARCH_LIMITS["longmemeval"],
        notes=[
            f"{len(entries)} questions without _abs; not scored, no answer session has a user "
            f"turn marked has_answer: {sum(without_gold.values())}"
            + (f" ({skipped})" if skipped else "")
        ],
        variants={"all answer_session_ids as gold": lenient},
        undated_sessions=undated,
    )


def _round_robin(entries: list[dict[str, Any]], *, key: str) -> list[dict[str, Any]]:
    """The first of each kind, then the second of each kind, ...: so that a few questions of a
    smoke run cover every question type (the file holds them grouped by type)."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        by_kind.setdefault(entry[key], []).append(entry)
    interleaved = []
    for rank in range(max((len(group) for group in by_kind.values()), default=0)):
        interleaved.extend(group[rank] for group in by_kind.values() if rank < len(group))
    return interleaved


def dataset_trim(dataset: Dataset, *, sessions: int) -> None:
    """Smoke runs: each user keeps the sessions that hold a gold unit of its questions, then its
    first others, up to ``sessions`` in all (more when the gold needs more), in their order.
    Every gold unit stays, so every question is still scored."""
    wanted: dict[str, set[str]] = {}
    for question in _questions_to_ask(dataset):
        wanted.setdefault(question.user_id, set()).update(question.gold)
    for haystack in dataset.haystacks:
        gold = wanted.get(haystack.user_id, set())
        needed = [session for session in haystack.sessions if gold & set(session.units)]
        others = [session for session in haystack.sessions if not gold & set(session.units)]
        kept = {id(session) for session in needed + others[: max(0, sessions - len(needed))]}
        haystack.sessions = [session for session in haystack.sessions if id(session) in kept]


def _longmemeval_haystack(entry: dict[str, Any], *, users: str) -> tuple[Haystack, int]:
    sessions, used, undated = [], set(), 0
    for original, turns, date in zip(
        entry["haystack_session_ids"],
        entry["haystack_sessions"],
        entry["haystack_dates"],
        strict=True,
    ):
        # A haystack may hold the same session twice (on two dates): each gets its own id.
        base = SESSION_ID_UNSAFE.sub("_", original)[:60] or "session"
        session_id, copy = base, 1
        while session_id in used:
            copy += 1
            session_id = f"{base}-{copy}"
        used.add(session_id)
        occurred_at = longmemeval_date_parse(date)
        undated += occurred_at is None
        sessions.append(
            SessionPlan(
                session_id=session_id,
                occurred_at=occurred_at,
                messages=[{"role": turn["role"], "content": turn["content"]} for turn in turns],
                speakers=[turn["role"] for turn in turns],
                units=[original] * len(turns),
                turn_keys=[f"{original}#{index}" for index in range(len(turns))],
            )
        )
    user_id = f"{users}-lme-{entry['question_id']}"
    return Haystack(user_id=user_id, sessions=sessions), undated


# --- Talking to the server -----------------------------------------------------------------------


class Clients:
    """One keep-alive client per thread (a longer timeout than the default: long haystack adds,
    searches under load)."""

    def __init__(self, base_url: str, api_key: str, timeout: float) -> None:
        self.base_url, self.api_key, self.timeout = base_url, api_key, timeout
        self.local = threading.local()

    def get(self) -> KeepAliveClient:
        client = getattr(self.local, "client", None)
        if client is None:
            client = self.local.client = KeepAliveClient(
                self.base_url, self.api_key, timeout=self.timeout
            )
        return client


def _session_messages(
    client: KeepAliveClient, user_id: str, session_id: str
) -> list[dict[str, Any]]:
    """All messages of a session, oldest first; [] when the session does not exist."""
    messages: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        query = {"user_id": user_id, "limit": 1000} | ({"cursor": cursor} if cursor else {})
        path = f"/sessions/{quote(session_id)}/messages?{urlencode(query)}"
        status, payload = client.request("GET", path)
        if status == 404:
            return []
        if status != 200 or not isinstance(payload, dict):
            raise BenchError(f"GET {path}: {status} {payload}")
        messages.extend(payload["results"])
        cursor = payload.get("next_cursor")
        if not cursor:
            return messages


def _default_conversation_turns(client: KeepAliveClient, user_id: str) -> int:
    """How many turns the user's default conversations (sessions with no session_id) hold; 0
    for a user the server does not know."""
    total, cursor = 0, None
    while True:
        query = {"user_id": user_id, "limit": 1000} | ({"cursor": cursor} if cursor else {})
        path = f"/sessions?{urlencode(query)}"
        status, payload = client.request("GET", path)
        if status == 404:
            return 0
        if status != 200 or not isinstance(payload, dict):
            raise BenchError(f"GET {path}: {status} {payload}")
        total += sum(
            int(session["message_count"])
            for session in payload["results"]
            if session.get("session_id") is None
        )
        cursor = payload.get("next_cursor")
        if not cursor:
            return total


def _added_ids(status: int, payload: object, *, count: int, where: str) -> list[str]:
    """The stored messages' ids an add answered, in the order sent."""
    if status == 429:
        raise BenchError(RATE_LIMIT_HINT)
    if status != 202 or not isinstance(payload, dict):
        raise BenchError(f"POST /memory/add ({where}): {status} {payload}")
    ids = [str(value) for value in payload.get("message_ids") or []]
    if len(ids) != count:
        raise BenchError(
            f"POST /memory/add answered {len(ids)} message_ids for {count} messages ({where})"
        )
    return ids


def _add_session(client: KeepAliveClient, user_id: str, session: SessionPlan) -> list[str]:
    """The session pattern: one add; the stored messages' ids, in the order sent."""
    body: dict[str, Any] = {
        "user_id": user_id,
        "session_id": session.session_id,
        "messages": session.messages,
    }
    if session.occurred_at:
        body["occurred_at"] = session.occurred_at
    where = f"{user_id}/{session.session_id}"
    try:
        status, payload = client.request("POST", "/memory/add", json.dumps(body).encode())
    except DROPPED:
        # The connection dropped under the add: whether it was stored decides what to do, as
        # sending it again would append the turns a second time.
        client.close()
        stored = _session_messages(client, user_id, session.session_id)
        if len(stored) == len(session.messages):
            return [str(message["id"]) for message in stored]
        if stored:
            raise BenchError(f"{where}: partly stored after a drop") from None
        status, payload = client.request("POST", "/memory/add", json.dumps(body).encode())
    return _added_ids(status, payload, count=len(session.messages), where=where)


def _turn_adds(user_id: str, session: SessionPlan) -> list[dict[str, Any]]:
    """The turns pattern's adds for one haystack session, one per turn, as the published MIRIX
    client sends a conversation: no session_id (the server files them in the user's default
    conversation), role ``user``, the speaker named in the text (``"<speaker>: <text>"``); the
    haystack session's date, and a tag naming the session the session pattern would add."""
    dated = {"occurred_at": session.occurred_at} if session.occurred_at else {}
    return [
        {
            "user_id": user_id,
            "messages": [{"role": "user", "content": f"{speaker}: {message['content']}"}],
            "filter_tags": {"session": session.session_id},
        }
        | dated
        for message, speaker in zip(session.messages, session.speakers, strict=True)
    ]


def _add_turn(client: KeepAliveClient, body: dict[str, Any], *, stored_before: int) -> str:
    """The turns pattern: one add of one turn, after ``stored_before`` of the user's; the stored
    message's id."""
    user_id, data = body["user_id"], json.dumps(body).encode()
    try:
        status, payload = client.request("POST", "/memory/add", data)
    except DROPPED:
        # As in _add_session, except that the default conversation's turns cannot be read
        # back: its count tells whether the turn was stored, but not under which id.
        client.close()
        stored = _default_conversation_turns(client, user_id)
        if stored != stored_before:
            raise BenchError(
                f"{user_id}: {stored} turns stored after a dropped add, {stored_before} before "
                "it: a stored turn's id cannot be read back from the default conversation"
            ) from None
        status, payload = client.request("POST", "/memory/add", data)
    return _added_ids(status, payload, count=1, where=f"{user_id}, turn {stored_before + 1}")[0]


def _memories(client: KeepAliveClient, user_id: str) -> dict[str, Any]:
    """Every memory of the user, of every type (``GET /memory/components``)."""
    query = urlencode({"user_id": user_id, "memory_type": "all", "limit": 0})
    status, payload = client.request("GET", f"/memory/components?{query}")
    if status != 200 or not isinstance(payload, dict):
        raise BenchError(f"GET /memory/components for {user_id}: {status} {payload}")
    return payload


def _cited_ids(payload: dict[str, Any], kind: str | None = None) -> set[str]:
    """The message ids the memories of ``_memories`` cite (only those of ``kind``, if named)."""
    return {
        str(value)
        for name, group in payload["memories"].items()
        if (kind is None and name != "knowledge") or name == kind
        for memory in group["items"]
        for value in memory.get("source_message_ids") or []
    }


def _search_available(client: KeepAliveClient) -> bool:
    """False when the server's OpenAPI schema has no ``/memory/search`` (not built yet)."""
    status, payload = client.request("GET", "/api/schema/?format=json")
    if status != 200 or not isinstance(payload, dict) or "paths" not in payload:
        return True  # no schema to go by: let the searches tell
    return "/memory/search" in payload["paths"]


def _in_parallel(
    pool: ThreadPoolExecutor,
    function: Callable[[Item], Outcome],
    items: Sequence[Item],
    progress: Callable[[int], str] | None = None,
) -> list[Outcome]:
    """``function`` over ``items`` on the pool, results in order; the first error is raised."""
    futures: list[Future[Outcome]] = [pool.submit(function, item) for item in items]
    pending = set(futures)
    while pending:
        _done, pending = wait(pending, timeout=PROGRESS_EVERY_SECONDS)
        if progress is not None and pending:
            print(progress(len(futures) - len(pending)), flush=True)
    return [future.result() for future in futures]


# --- Ingest and wait for extraction --------------------------------------------------------------


@dataclass
class TurnRef:
    """What a stored message is in the benchmark: its unit, its turn, its place in the user's
    haystack."""

    unit: str
    turn_key: str
    order: int


Provenance = dict[str, dict[str, TurnRef]]  # user_id -> message id -> turn


@dataclass
class IngestReport:
    """What went in, how long it took to become searchable, and what the worker made of it."""

    users: int
    sessions: int
    messages: int
    adds: int
    add_seconds: float | None = None
    searchable_seconds: float | None = None
    failed_messages: int = 0
    turns_cited_by_episodic: int = 0
    turns_cited_by_any: int = 0
    memory_counts: dict[str, int] = field(default_factory=dict)


def _adds_of(haystack: Haystack, client_pattern: str) -> int:
    return haystack.message_count if client_pattern == "turns" else len(haystack.sessions)


def _provenance_of(haystack: Haystack, ids_per_session: list[list[str]]) -> dict[str, TurnRef]:
    refs: dict[str, TurnRef] = {}
    order = 0
    for session, ids in zip(haystack.sessions, ids_per_session, strict=True):
        for message_id, unit, key in zip(ids, session.units, session.turn_keys, strict=True):
            refs[message_id] = TurnRef(unit=unit, turn_key=key, order=order)
            order += 1
    return refs


def _ingest(
    *,
    clients: Clients,
    pool: ThreadPoolExecutor,
    haystacks: list[Haystack],
    client_pattern: str = "session",
) -> tuple[Provenance, float]:
    total = sum(_adds_of(haystack, client_pattern) for haystack in haystacks)
    sent = [0]
    lock = threading.Lock()

    def added() -> None:
        with lock:
            sent[0] += 1

    def one_user(haystack: Haystack) -> dict[str, TurnRef]:
        client = clients.get()
        ids_per_session: list[list[str]] = []
        for session in haystack.sessions:
            if client_pattern == "session":
                ids = _add_session(client, haystack.user_id, session)
                added()
            else:
                earlier = sum(len(session_ids) for session_ids in ids_per_session)
                ids = []
                for body in _turn_adds(haystack.user_id, session):
                    ids.append(_add_turn(client, body, stored_before=earlier + len(ids)))
                    added()
            ids_per_session.append(ids)
        return _provenance_of(haystack, ids_per_session)

    began = time.perf_counter()
    refs = _in_parallel(
        pool, one_user, haystacks, lambda _users: f"  {sent[0]} of {total} adds sent"
    )
    seconds = time.perf_counter() - began
    return {h.user_id: r for h, r in zip(haystacks, refs, strict=True)}, seconds


_SAME_RUN = (
    "was this run ingested with the same --dataset, --split, --client-pattern, "
    "--limit-questions and --smoke?"
)


def _provenance_read(
    *, clients: Clients, pool: ThreadPoolExecutor, haystacks: list[Haystack]
) -> Provenance:
    """--skip-ingest, session pattern: a session is one add, so its messages in position order
    are its turns."""

    def one_user(haystack: Haystack) -> dict[str, TurnRef]:
        client = clients.get()
        ids_per_session = []
        for session in haystack.sessions:
            stored = _session_messages(client, haystack.user_id, session.session_id)
            if len(stored) != len(session.messages):
                raise BenchError(
                    f"{haystack.user_id}/{session.session_id}: {len(stored)} messages stored, "
                    f"{len(session.messages)} expected: {_SAME_RUN}"
                )
            ids_per_session.append([str(message["id"]) for message in stored])
        return _provenance_of(haystack, ids_per_session)

    refs = _in_parallel(pool, one_user, haystacks)
    return {h.user_id: r for h, r in zip(haystacks, refs, strict=True)}


def _turns_provenance_read(
    *, clients: Clients, pool: ThreadPoolExecutor, haystacks: list[Haystack]
) -> Provenance:
    """--skip-ingest, turns pattern, once extracted: the default conversation's turns cannot
    be listed (see _TurnsSweeper), but each is cited by some memory, and a user's turns were
    added one at a time, in order, so the server numbered them in that order: the cited ids in
    numeric order are the haystack's turns. Refused when the count is not exactly that."""

    def one_user(haystack: Haystack) -> dict[str, TurnRef]:
        cited = _cited_ids(_memories(clients.get(), haystack.user_id))
        if len(cited) != haystack.message_count or not all(value.isdigit() for value in cited):
            raise BenchError(
                f"{haystack.user_id}: its memories cite {len(cited)} messages, "
                f"{haystack.message_count} turns expected: the turns pattern's ids are read "
                "back from the memories citing them, which needs one per turn, numbered"
            )
        ordered = iter(sorted(cited, key=int))
        return _provenance_of(
            haystack,
            [[next(ordered) for _message in session.messages] for session in haystack.sessions],
        )

    refs = _in_parallel(pool, one_user, haystacks)
    return {h.user_id: r for h, r in zip(haystacks, refs, strict=True)}


class _SessionSweeper:
    """The session pattern's progress: a user's sessions are read back in order, stopping at
    the first with a turn still ``pending`` (the worker takes a user's oldest turns first), and
    a session once done is not read again. One thread sweeps a user at a time."""

    stalled = "is the Celery worker running? Look at the extraction jobs in the admin."

    def __init__(self, haystacks: list[Haystack]) -> None:
        self.remaining = {haystack.user_id: list(haystack.sessions) for haystack in haystacks}
        self.processed = {haystack.user_id: 0 for haystack in haystacks}
        self.failed = {haystack.user_id: 0 for haystack in haystacks}

    def waiting(self) -> list[str]:
        return [user_id for user_id, left in self.remaining.items() if left]

    def sweep(self, client: KeepAliveClient, user_id: str) -> None:
        sessions = self.remaining[user_id]
        while sessions:
            stored = _session_messages(client, user_id, sessions[0].session_id)
            if not stored or any(message["extraction"] == "pending" for message in stored):
                return
            self.processed[user_id] += len(stored)
            self.failed[user_id] += sum(1 for m in stored if m["extraction"] == "failed")
            sessions.pop(0)


class _TurnsSweeper:
    """The turns pattern's progress. Its turns are in the user's default conversation, whose
    messages and their extraction state the API cannot read: ``GET /sessions/{id}/messages``
    names a session by the caller's session_id, and that one has none (``GET /sessions`` lists
    it, with its count). So a turn counts as processed once some memory cites it, which the
    deterministic extractor does for every turn (each is in one exchange's episode); a failed
    turn is never cited, and shows as a stall. Each user's stored count is checked first."""

    stalled = (
        "in the turns pattern a turn is seen as processed once a memory cites it (the API "
        "shows no extraction state for the default conversation): is the Celery worker "
        "running, or does the server's extractor leave turns uncited?"
    )

    def __init__(self, haystacks: list[Haystack]) -> None:
        self.expected = {haystack.user_id: haystack.message_count for haystack in haystacks}
        self.processed = {haystack.user_id: 0 for haystack in haystacks}
        self.failed: dict[str, int] = {}
        self.checked: set[str] = set()

    def waiting(self) -> list[str]:
        return [
            user_id for user_id, count in self.expected.items() if self.processed[user_id] < count
        ]

    def sweep(self, client: KeepAliveClient, user_id: str) -> None:
        if user_id not in self.checked:
            stored = _default_conversation_turns(client, user_id)
            if stored != self.expected[user_id]:
                raise BenchError(
                    f"{user_id}: {stored} turns in its default conversation, "
                    f"{self.expected[user_id]} expected: {_SAME_RUN}"
                )
            self.checked.add(user_id)
        self.processed[user_id] = len(_cited_ids(_memories(client, user_id)))


def _wait_until_extracted(
    *,
    clients: Clients,
    pool: ThreadPoolExecutor,
    haystacks: list[Haystack],
    poll_interval: float,
    stall_seconds: float,
    client_pattern: str = "session",
) -> int:
    """Sweeps until every turn of every bench user is processed (_SessionSweeper,
    _TurnsSweeper); the number of ``failed`` messages."""
    sweeper = (_SessionSweeper if client_pattern == "session" else _TurnsSweeper)(haystacks)
    total = sum(haystack.message_count for haystack in haystacks)

    def sweep(user_id: str) -> None:
        sweeper.sweep(clients.get(), user_id)

    began = last_change = next_report = time.perf_counter()
    last_done = -1
    while waiting := sweeper.waiting():
        sweep_began = time.perf_counter()
        _in_parallel(pool, sweep, waiting)
        now, done = time.perf_counter(), sum(sweeper.processed.values())
        if done != last_done:
            last_change, last_done = now, done
        elif now - last_change > stall_seconds:
            raise BenchError(
                f"no message processed for {stall_seconds:.0f} s ({done} of {total}): "
                + sweeper.stalled
            )
        if now >= next_report and sweeper.waiting():
            print(f"  {now - began:7.1f} s  {done} of {total} messages processed", flush=True)
            next_report = now + PROGRESS_EVERY_SECONDS
        if sweeper.waiting():
            time.sleep(max(0.0, poll_interval - (time.perf_counter() - sweep_began)))
    return sum(sweeper.failed.values())


def _coverage(
    *, clients: Clients, pool: ThreadPoolExecutor, provenance: Provenance, report: IngestReport
) -> None:
    """How many turns some memory cites, and how many memories of each type there are."""

    def one_user(user_id: str) -> tuple[set[str], set[str], dict[str, int]]:
        payload = _memories(clients.get(), user_id)
        counts = {kind: int(count) for kind, count in payload["counts"].items()}
        return _cited_ids(payload, "episodic"), _cited_ids(payload), counts

    for user_id, (episodic, cited, counts) in zip(
        provenance, _in_parallel(pool, one_user, list(provenance)), strict=True
    ):
        turns = provenance[user_id].keys()
        report.turns_cited_by_episodic += len(turns & episodic)
        report.turns_cited_by_any += len(turns & cited)
        for kind, count in counts.items():
            report.memory_counts[kind] = report.memory_counts.get(kind, 0) + count


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


def _questions_to_ask(dataset: Dataset) -> list[Question]:
    """The scored questions, plus those only a variant gold scores."""
    asked = {question.question_id: question for question in dataset.questions}
    for questions in dataset.variants.values():
        for question in questions:
            asked.setdefault(question.question_id, question)
    return list(asked.values())


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
    return answer, unknown


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

# The English stop words of NLTK (nltk_data corpora/stopwords/english, 179 words) less its 26
# forms with an apostrophe ("don't", "you're"), which a token never is: their pieces ("don", "t",
# "re") are in the list.
_STOP_WORDS_TEXT = """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
    she her hers herself it its itself they them their theirs themselves what which who whom
    this that these those am is are was were be been being have has had having do does did
    doing a an the and but if or because as until while of at by for with about against between
    into through during before after above below to from up down in out on off over under again
    further then once here there when where why how all any both each few more most other some
    such no nor not only own same so than too very s t can will just don should now d ll m o re
    ve y ain aren couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn
    weren won wouldn
"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
REFERENCE_K1, REFERENCE_B = 1.5, 0.75
_REFERENCE_TOKEN = re.compile(r"[^\W_]+")  # runs of letters and digits
REFERENCE_RULE = (
    "Okapi BM25 (k1 1.5, b 0.75, idf ln(1 + (N - df + 0.5) / (df + 0.5))) over each user's "
    "documents, lower case, tokens runs of letters/digits, NLTK English stop words dropped; "
    "LoCoMo: one document per turn, '<speaker>: <text>'; LongMemEval: one per haystack "
    "session, its user turns"
)


def reference_tokens(text: str) -> list[str]:
    return [token for token in _REFERENCE_TOKEN.findall(text.lower()) if token not in STOP_WORDS]


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


# --- Reporting -----------------------------------------------------------------------------------


TABLE_COLUMNS = [
    ("any@1", "recall_any@1"),
    ("any@5", "recall_any@5"),
    ("any@10", "recall_any@10"),
    ("any@20", "recall_any@20"),
    ("all@5", "recall_all@5"),
    ("all@10", "recall_all@10"),
    ("ndcg@10", f"ndcg@{NDCG_CUTOFF}"),
]


def _table(title: str, rows: list[tuple[str, dict[str, float]]]) -> None:
    print(f"  {title}")
    heading = "".join(f"{name:>8}" for name, _metric in TABLE_COLUMNS)
    print(f"    {'method':<11}{'n':>6}{heading}")
    for label, means in rows:
        cells = "".join(f"{means[metric]:8.3f}" for _name, metric in TABLE_COLUMNS)
        print(f"    {label:<11}{int(means['questions']):>6}{cells}")


@dataclass
class DatasetRun:
    """One dataset's ingest, its runs (one per search_method), and the reference's answers to
    the same questions."""

    dataset: Dataset
    ingest: IngestReport
    runs: list[MethodRun]
    reference: MethodRun

    def categories(self) -> list[str]:
        return sorted({question.category for question in self.dataset.questions})

    def gold(self, category: str | None = None, *, without: str | None = None) -> Gold:
        return gold_of(
            question
            for question in self.dataset.questions
            if (category is None or question.category == category) and question.category != without
        )


def _scores(result: DatasetRun, run: MethodRun) -> dict[str, Any]:
    """One run's means: overall, per category, and under each other gold."""
    dataset = result.dataset
    scores: dict[str, Any] = {
        "overall": mean_scores(run.answers, result.gold()),
        "per_category": {
            category: mean_scores(run.answers, result.gold(category))
            for category in result.categories()
        },
    }
    if dataset.name == "locomo":
        scores["overall_without_category_5"] = mean_scores(
            run.answers, result.gold(without=ADVERSARIAL)
        )
    for label, questions in dataset.variants.items():
        scores[label] = mean_scores(
            run.answers, gold_of(question for question in questions if question.gold)
        )
    return scores


def _question_rows(run: MethodRun) -> list[dict[str, Any]]:
    return [
        {
            "id": answer.question.question_id,
            "category": answer.question.category,
            "gold": sorted(answer.question.gold),
            "ranked": answer.ranked[: max(CUTOFFS)],
            "turns": answer.turns[: 2 * max(CUTOFFS)],
            "error": answer.error,
            "latency_ms": round(answer.latency_ms, 2),
        }
        for answer in run.answers
    ]


def _against_reference(figures: dict[str, Any], metric: str) -> dict[str, dict[str, Any]]:
    """Per lane, its goal metric beside the reference's."""
    reference = figures[REFERENCE]["overall"][metric]
    verdicts = {}
    for name, method in figures["methods"].items():
        value = method["overall"][metric]
        verdicts[name] = {"value": value, "reference": reference, "at_or_above": value >= reference}
    return verdicts


def _figures(result: DatasetRun) -> dict[str, Any]:
    """Every figure of one dataset, as printed and as written by --json-out."""
    dataset = result.dataset
    figures: dict[str, Any] = {
        "split": dataset.split,
        "client_pattern": dataset.client_pattern,
        "users": len(dataset.haystacks),
        "questions_scored": len(dataset.questions),
        "unit": dataset.unit,
        "search_limit": dataset.search_limit,
        "goal": {"metric": dataset.goal[0], "value": dataset.goal[1]},
        "notes": dataset.notes,
        "ingest": asdict(result.ingest),
        "methods": {},
    }
    for run in result.runs:
        figures["methods"][run.method] = _scores(result, run) | {
            "latency_ms": {"p50": run.latency(0.5), "p95": run.latency(0.95)},
            "searches": len(run.answers),
            "errors": run.errors,
            "results": run.shape(),
            "uncited_source_message_ids": run.unknown_source_ids,
            "questions": _question_rows(run),
        }
    figures[REFERENCE] = (
        {"rule": REFERENCE_RULE}
        | _scores(result, result.reference)
        | {"questions": _question_rows(result.reference)}
    )
    figures["against_reference"] = _against_reference(figures, dataset.goal[0])
    return figures


def _search_summary(method: dict[str, Any]) -> str:
    summary = (
        f"p50 {method['latency_ms']['p50']:6.1f} ms  p95 {method['latency_ms']['p95']:6.1f} ms  "
        f"errors {sum(method['errors'].values())} of {method['searches']}"
    )
    if method["errors"]:
        summary += f" {method['errors']}"
    shape = method["results"]
    summary += (
        f"; per search {shape['mean_results']:.1f} memories -> "
        f"{shape['mean_ranked_units']:.1f} units, fewer than {max(CUTOFFS)} units "
        f"{shape['short_lists']}; gate {shape['gates']}"
    )
    if method["uncited_source_message_ids"]:
        summary += f"  source ids not bench turns: {method['uncited_source_message_ids']}"
    return summary


def _report_dataset(result: DatasetRun, figures: dict[str, Any], *, search: str) -> None:
    dataset, methods = result.dataset, figures["methods"]
    # Every table shows the reference beside the server's lanes.
    scored = {**methods, REFERENCE: figures[REFERENCE]}
    print(
        f"\n== {dataset.title}, {dataset.split} split, {dataset.client_pattern} pattern: "
        f"{len(dataset.haystacks)} users, "
        f"{len(dataset.questions)} questions scored, {dataset.unit} level, {search}"
    )
    _report_ingest(result.ingest)
    if dataset.undated_sessions:
        print(f"  sessions added without occurred_at (date unreadable): {dataset.undated_sessions}")
    for note in dataset.notes:
        print(f"  {note}")
    _table("all questions", [(name, method["overall"]) for name, method in scored.items()])
    if dataset.name == "locomo":
        _table(
            "without category 5 (adversarial)",
            [(name, method["overall_without_category_5"]) for name, method in scored.items()],
        )
    for label in dataset.variants:
        counted = figures[REFERENCE][label]["questions"]
        scores = "; ".join(
            f"{name} recall_any@5 {method[label]['recall_any@5']:.3f}"
            for name, method in scored.items()
        )
        print(f"  with {label} ({counted} questions): {scores}")
    metric = dataset.per_category_metric
    all_metric = metric.replace("any", "all")
    print(f"  per category, {metric} / {all_metric}:")
    print(f"    {'category':<27}{'n':>5}" + "".join(f"{name:>17}" for name in scored))
    for category in result.categories():
        cells = [
            f"{method['per_category'][category][metric]:.3f} / "
            f"{method['per_category'][category][all_metric]:.3f}"
            for method in scored.values()
        ]
        count = int(figures[REFERENCE]["per_category"][category]["questions"])
        print(f"    {category:<27}{count:>5}" + "".join(f"{cell:>17}" for cell in cells))
    print(f"  {REFERENCE}: {REFERENCE_RULE}")
    print("  searches (latency with --threads searches in flight):")
    for name, method in methods.items():
        print(f"    {name:<11}{_search_summary(method)}")
    if "hybrid" in methods and set(methods["hybrid"]["results"]["gates"]) == {"off"}:
        print(
            "    note: hybrid ran with the similarity gate off (no calibration for the server's "
            "embedding model: manage.py calibrate_gate)"
        )
    metric, goal = dataset.goal
    print(f"  goal: {dataset.unit}-level {metric} >= {goal} (all questions)")
    for name, method in methods.items():
        value = method["overall"][metric]
        print(f"    {name:<11}{value:.3f}  {verdict(value >= goal)}")
    print(f"  against the {REFERENCE} on {metric} (goal: hybrid never below it)")
    for name, against in figures["against_reference"].items():
        sign, word = (">=", "ok") if against["at_or_above"] else ("<", "BELOW")
        print(
            f"    {name} {against['value']:.3f} {sign} reference {against['reference']:.3f}: {word}"
        )
    if "hybrid" in methods:
        below = [
            f"{category} {methods['hybrid']['per_category'][category][metric]:.3f} < "
            f"{figures[REFERENCE]['per_category'][category][metric]:.3f}"
            for category in result.categories()
            if methods["hybrid"]["per_category"][category][metric]
            < figures[REFERENCE]["per_category"][category][metric]
        ]
        print(f"    hybrid below the reference per category: {'; '.join(below) or 'none'}")


def _report_ingest(report: IngestReport) -> None:
    line = f"  ingest: {report.sessions} sessions, {report.messages} messages in {report.adds} adds"
    if report.add_seconds is None:
        line += " (reused with --skip-ingest)"
    else:
        line += f"; adds {report.add_seconds:.1f} s ({report.adds / report.add_seconds:.1f}/s)"
    if report.searchable_seconds is not None:
        line += (
            f"; add to searchable {report.searchable_seconds:.1f} s "
            f"({report.messages / report.searchable_seconds:.1f} messages/s)"
        )
    print(line)
    if report.failed_messages:
        print(f"  WARNING: {report.failed_messages} messages failed extraction")
    counts = ", ".join(f"{kind} {count}" for kind, count in sorted(report.memory_counts.items()))
    print(
        f"  memories: {counts}; turns cited: by an episodic memory "
        f"{report.turns_cited_by_episodic} of {report.messages}, by any memory "
        f"{report.turns_cited_by_any}"
    )


def _json_safe(value: Any) -> Any:
    """NaN (a mean over no questions, a percentile of no searches) as null: strict JSON."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_safe(item) for item in value]
    return value


# --- The run -------------------------------------------------------------------------------------


def _prepare(
    *,
    dataset: Dataset,
    clients: Clients,
    pool: ThreadPoolExecutor,
    skip_ingest: bool,
    poll_interval: float,
    stall_seconds: float,
) -> tuple[Provenance, IngestReport]:
    pattern = dataset.client_pattern
    report = IngestReport(
        users=len(dataset.haystacks),
        sessions=sum(len(haystack.sessions) for haystack in dataset.haystacks),
        messages=sum(haystack.message_count for haystack in dataset.haystacks),
        adds=sum(_adds_of(haystack, pattern) for haystack in dataset.haystacks),
    )
    print(
        f"{dataset.title} ({dataset.split}): {report.users} users, {report.sessions} sessions, "
        f"{report.messages} messages in {report.adds} adds ({pattern} pattern), "
        f"{len(_questions_to_ask(dataset))} questions",
        flush=True,
    )
    began = time.perf_counter()
    if skip_ingest and pattern == "session":
        # Read first: a run ingested otherwise is refused at once, not after a stall.
        provenance = _provenance_read(clients=clients, pool=pool, haystacks=dataset.haystacks)
    elif not skip_ingest:
        provenance, report.add_seconds = _ingest(
            clients=clients, pool=pool, haystacks=dataset.haystacks, client_pattern=pattern
        )
        print(f"  adds done in {report.add_seconds:.1f} s; waiting for extraction", flush=True)
    report.failed_messages = _wait_until_extracted(
        clients=clients,
        pool=pool,
        haystacks=dataset.haystacks,
        poll_interval=poll_interval,
        stall_seconds=stall_seconds,
        client_pattern=pattern,
    )
    if skip_ingest and pattern == "turns":
        # The turns' ids are read from the memories that cite them: only once all are made.
        provenance = _turns_provenance_read(clients=clients, pool=pool, haystacks=dataset.haystacks)
    if not skip_ingest:
        report.searchable_seconds = time.perf_counter() - began
    _coverage(clients=clients, pool=pool, provenance=provenance, report=report)
    return provenance, report


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    server_arguments(parser)
    parser.add_argument("--dataset", choices=["locomo", "longmemeval", "both"], default="both")
    parser.add_argument(
        "--split",
        choices=SPLITS,
        default="test",
        help="held-out half: LoCoMo conversations 1-5 (dev) or 6-10 (test); LongMemEval-S "
        "sample60 (dev) or more100 (test). Choose rules on dev, report test.",
    )
    parser.add_argument(
        "--client-pattern",
        choices=CLIENT_PATTERNS,
        default="session",
        help="session: one add per haystack session, with its session_id; turns: one add per "
        "turn, no session_id, role user, '<speaker>: <text>' (as the MIRIX client sends)",
    )
    parser.add_argument(
        "--limit-questions",
        type=int,
        default=None,
        help="smoke runs: N questions per dataset, and only the haystacks they need (LoCoMo: "
        "the first N; LongMemEval: taken in turn from each question_type)",
    )
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated")
    parser.add_argument("--memory-type", default="episodic", help="memory_type of the searches")
    parser.add_argument(
        "--search-limit",
        type=int,
        default=None,
        help="memories per search (1-100); default LoCoMo 20, LongMemEval 100",
    )
    parser.add_argument("--skip-ingest", action="store_true", help="reuse --run-id's users")
    parser.add_argument("--run-id", default=None, help="default: the UTC time")
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--poll-interval", type=float, default=2.0, help="seconds")
    parser.add_argument(
        "--stall-seconds", type=float, default=600.0, help="give up when nothing moves this long"
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="per request, seconds")
    arguments = arguments_parse(parser, argv, smoke=SMOKE)
    arguments.methods = [method.strip() for method in arguments.methods.split(",") if method]
    if not arguments.methods or set(arguments.methods) - set(METHODS):
        parser.error(f"--methods: a comma-separated subset of {','.join(METHODS)}")
    if arguments.skip_ingest and not arguments.run_id:
        parser.error("--skip-ingest needs the --run-id of the run whose users to reuse")
    if arguments.run_id and not RUN_ID_PATTERN.match(arguments.run_id):
        parser.error("--run-id: letters, digits and _.@:+- only")
    if arguments.search_limit is not None and not 1 <= arguments.search_limit <= 100:
        parser.error("--search-limit: 1 to 100 (the API's maximum)")
    if arguments.limit_questions is not None and arguments.limit_questions < 1:
        parser.error("--limit-questions must be at least 1")
    return arguments


def _datasets(arguments: argparse.Namespace, run_id: str) -> list[Dataset]:
    datasets: list[Dataset] = []
    if arguments.dataset in ("locomo", "both"):
        datasets.append(
            locomo_load(
                arguments.data_dir / LOCOMO_FILE,
                run_id=run_id,
                limit=arguments.limit_questions,
                split=arguments.split,
                client_pattern=arguments.client_pattern,
            )
        )
    if arguments.dataset in ("longmemeval", "both"):
        datasets.append(
            longmemeval_load(
                arguments.data_dir / LONGMEMEVAL_FILES[arguments.split],
                run_id=run_id,
                limit=arguments.limit_questions,
                split=arguments.split,
                client_pattern=arguments.client_pattern,
            )
        )
    for dataset in datasets:
        if arguments.search_limit is not None:
            dataset.search_limit = arguments.search_limit
        if arguments.smoke:
            dataset_trim(dataset, sessions=SMOKE_SESSIONS)
    return datasets


def _check_key(client: KeepAliveClient) -> None:
    status, payload = client.request("GET", "/users?limit=1")
    if status == 401:
        raise BenchError(f"401: the API key was refused ({payload})")
    if status == 429:
        raise BenchError(RATE_LIMIT_HINT)
    if status != 200:
        raise BenchError(f"GET /users answered {status} {payload}")


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _arguments(argv)
    try:
        api_key = api_key_read(arguments)
    except BenchError as error:
        print(error, file=sys.stderr)
        return 1
    run_id = arguments.run_id or datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    datasets = _datasets(arguments, run_id)
    clients = Clients(arguments.base_url, api_key, arguments.timeout)
    print(
        f"run {run_id} against {arguments.base_url}: {arguments.split} split, "
        f"{arguments.client_pattern} pattern, users "
        f"{_user_prefix(run_id, arguments.client_pattern)}-*, "
        f"methods {','.join(arguments.methods)}, "
        f"memory_type={arguments.memory_type}, "
        f"{arguments.threads} threads",
        flush=True,
    )
    results: list[DatasetRun] = []
    try:
        _check_key(clients.get())
        search_ready = _search_available(clients.get())
        if not search_ready:
            print("note: /memory/search is not in /api/schema/: ingesting only", flush=True)
        with ThreadPoolExecutor(arguments.threads) as pool:
            prepared = [
                (
                    dataset,
                    *_prepare(
                        dataset=dataset,
                        clients=clients,
                        pool=pool,
                        skip_ingest=arguments.skip_ingest,
                        poll_interval=arguments.poll_interval,
                        stall_seconds=arguments.stall_seconds,
                    ),
                )
                for dataset in datasets
            ]
            for dataset, _provenance, report in prepared:
                print(f"{dataset.title} ready:")
                _report_ingest(report)
            if not search_ready:
                raise SearchMissingError
            for dataset, provenance, report in prepared:
                runs = [
                    _run_method(
                        clients=clients,
                        pool=pool,
                        threads=arguments.threads,
                        questions=_questions_to_ask(dataset),
                        provenance=provenance,
                        method=method,
                        memory_type=arguments.memory_type,
                        limit=dataset.search_limit,
                    )
                    for method in arguments.methods
                ]
                results.append(
                    DatasetRun(
                        dataset=dataset, ingest=report, runs=runs, reference=reference_run(dataset)
                    )
                )
    except SearchMissingError:
        print(_SEARCH_MISSING.format(run_id=run_id), file=sys.stderr)
        return 2
    except BenchError as error:
        print(error, file=sys.stderr)
        return 1
    except OSError as error:
        print(f"{arguments.base_url}: {error} (is the server running?)", file=sys.stderr)
        return 1

    figures = {result.dataset.name: _figures(result) for result in results}
    for result in results:
        search = f"memory_type={arguments.memory_type}, limit={result.dataset.search_limit}"
        _report_dataset(result, figures[result.dataset.name], search=search)
    if arguments.json_out is not None:
        document = {
            "run_id": run_id,
            "split": arguments.split,
            "client_pattern": arguments.client_pattern,
            "base_url": arguments.base_url,
            "memory_type": arguments.memory_type,
            "threads": arguments.threads,
            "datasets": figures,
        }
        arguments.json_out.write_text(json.dumps(_json_safe(document), indent=1) + "\n")
        print(f"\nfigures written to {arguments.json_out}")
    if arguments.smoke:
        print(SMOKE_NOTE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
