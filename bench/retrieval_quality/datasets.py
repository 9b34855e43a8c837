"""The retrieval-quality bench's data: LoCoMo and LongMemEval-S read into what one bench end
user is told (a ``Haystack`` of ``SessionPlan`` sessions) and what it is asked (``Question``s,
with the units that answer them), per held-out split and client pattern; see steps 1 and 4 of
``__main__``'s docstring."""

from __future__ import annotations

import calendar
import gzip
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import BENCH_DATA_DIR

DEFAULT_DATA_DIR = BENCH_DATA_DIR
LOCOMO_FILE = Path("locomo") / "locomo10.json"
LONGMEMEVAL_FILE = Path("longmemeval") / "longmemeval_s_cleaned_sample60.json.gz"
# Held-out halves (bench-data/README.md): every rule, weight and threshold is chosen on dev, and
# test is reported without changing anything. LoCoMo: its first conversations in file order are
# dev, the rest test; LongMemEval-S: one file each.
SPLITS = ("dev", "test")
# How the bench's client adds a haystack: one add per session (with its session_id), or one per
# turn with no session_id, as the published MIRIX client sends them (see ingest._turn_adds),
# and so again with each turn's own id among its filter tags, as a client keeping its message
# ids as tags sends them.
CLIENT_PATTERNS = ("session", "turns", "turn-ids")
LOCOMO_DEV_CONVERSATIONS = 5
LONGMEMEVAL_FILES = {
    "dev": LONGMEMEVAL_FILE,
    "test": Path("longmemeval") / "longmemeval_s_cleaned_more100.json.gz",
}

LOCOMO_GOAL = ("recall_any@10", 0.80)
LONGMEMEVAL_GOAL = ("recall_any@5", 0.97)
LOCOMO_CATEGORIES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
ADVERSARIAL = "5 adversarial"

SESSION_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
# Memories asked per search. recall@k counts the first k distinct units, so a search must return
# at least 20 of them (LongMemEval's own turn-to-session scoring likewise reads on until it has
# k distinct sessions). A LoCoMo episodic memory is one exchange, so 20 memories hold about 40
# turns; a LongMemEval session holds about 10 exchanges, and 20 memories measured 8-10 distinct
# sessions, so those searches ask for the API's maximum. The first results do not depend on the
# limit, except through hybrid's over-fetch (each lane fetches 4 x limit before fusion).
SEARCH_LIMITS = {"locomo": 20, "longmemeval": 100}


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
    """``rq-<run>``, and ``rq-<run>-<pattern>`` for the others: a run's users hold one
    pattern's ingest, never two."""
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


def _questions_to_ask(dataset: Dataset) -> list[Question]:
    """The scored questions, plus those only a variant gold scores."""
    asked = {question.question_id: question for question in dataset.questions}
    for questions in dataset.variants.values():
        for question in questions:
            asked.setdefault(question.question_id, question)
    return list(asked.values())
