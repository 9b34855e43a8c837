"""Every benchmark's smoke mode against a live server, a real Celery worker and Redis. The benches
are run by hand, so this is what keeps them running as the code under them changes: each must
load, measure, report and clean up, and print figures of the right shape. Figures of a smoke run
mean nothing, except where the toy data makes one certain."""

from __future__ import annotations

import ast
import csv
import gzip
import json
import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connections

from accounts.models import EndUser
from bench import (
    auth,
    bm25_lane,
    dashboard,
    embedding_runtime,
    experience_quality,
    experiences,
    fairness,
    faults,
    images,
    ingest,
    memories_load,
    recommend_path,
    retrieval_latency,
    retrieval_quality,
    skill_families,
    skill_learning,
    task_families,
)
from bench.common import SMOKE_NOTE
from bench.memories_load import Vocabulary
from images.models import ImageObject
from memory.models import EpisodicMemory, ExtractionJob
from memory.query.recency import content_terms
from memory.types import MEMORY_TYPES
from mirix_site.console.models import DailyFigure
from mirix_site.search.kinds import SearchableKind
from mirix_site.search.lanes import lanes_close
from mirix_site.search.models import RetrievalLog, SegmentCover
from sessions.models import Message, Session
from skills.models import LearningRun, Recommendation, Skill
from tests import processes
from tests.factories import TenantFixture
from tests.skills.experiences import embed_all, record_many

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SCORE = r"\d\.\d{3}|nan"
RECALL = r"\d\.\d{3}|-"  # "-": no query of the row had an exact answer to compare with


@pytest.fixture
def smoke_argv(live_server, org: TenantFixture) -> list[str]:
    return ["--base-url", live_server.url, "--api-key", org.key, "--smoke"]


def test_auth_compares_the_two_endpoints_with_every_answer_a_200(smoke_argv, capsys) -> None:
    assert auth.main(smoke_argv) == 0

    out = capsys.readouterr().out
    threads, requests = map(int, re.search(r"(\d+) threads x (\d+) requests", out).groups())
    for label in ("GET /health", "GET /users (authenticated)"):
        [line] = [line for line in out.splitlines() if line.startswith(label)]
        assert re.search(r"p50 +\d+\.\d\d ms +p95 +\d+\.\d\d ms", line)
        assert line.endswith(f"statuses {{200: {threads * requests}}}")
    assert re.search(r"authenticated p50 - health p50 = [-+]\d+\.\d\d ms", out)
    assert SMOKE_NOTE in out


def test_ingest_times_the_adds_and_waits_until_each_is_searchable(
    smoke_argv, worker, capsys
) -> None:
    assert ingest.main(smoke_argv) == 0

    out = capsys.readouterr().out
    adds, messages = map(int, re.search(r"(\d+) two-turn adds \((\d+) messages\)", out).groups())
    assert messages == 2 * adds
    assert re.search(rf"POST /memory/add .* statuses \{{202: {adds}\}}", out)
    searchable = re.search(
        r"add to searchable: (\d+) messages in [\d.]+ s -> ([\d.]+) messages/s", out
    )
    assert int(searchable.group(1)) == messages
    assert float(searchable.group(2)) > 0
    assert SMOKE_NOTE in out


def test_faults_kill_a_worker_child_and_restart_redis_and_postgres(
    org: TenantFixture, tmp_path: Path, capsys
) -> None:
    # The stack make run starts, as processes: the bench kills the worker's children and
    # restarts this run's PostgreSQL and Redis under them.
    with (
        processes.celery_worker(tmp_path, concurrency=2) as worker,
        processes.web_server(tmp_path) as web,
    ):
        try:
            code = faults.main(["--base-url", web.url, "--api-key", org.key, "--smoke"])
        finally:
            connections.close_all()  # this process's died with the server
            lanes_close()
        jobs = ExtractionJob.objects.values_list(
            "end_user__user_id", "status", "attempts", "error"
        ).order_by("id")
        pending = Message.objects.exclude(extraction=Message.Extraction.PROCESSED).values_list(
            "end_user__user_id", "extraction"
        )
        exited = "" if worker.alive() else f"the worker exited with {worker.popen.returncode}\n"
        assert code == 0, (
            f"{exited}jobs {list(jobs)[-12:]}\nnot processed {list(pending)}\n"
            # CRITICAL: "Unrecoverable error", after which the worker shuts down.
            + worker.log_records(
                r"CRITICAL|ERROR|WARNING|[Rr]etry|raised|succeeded in|nothing to claim"
            )
        )
        assert worker.alive() and web.alive()  # neither restarted

    out = capsys.readouterr().out
    assert re.search(r"worker: 48 messages of a backlog extracted in [\d.]+ s, no kill", out)
    assert re.search(
        r"worker: child \d+ SIGKILLed [\d.]+ s after the backlog was in, \d+ of 48 messages "
        r"not yet extracted; all were [\d.]+ s after the backlog was in; lost 0, stored twice 0",
        out,
    )
    assert re.search(r"redis: down [\d.]+ s, [1-9]\d* adds answered 202, slowest \d+ ms", out)
    assert re.search(r"redis: a new add extracted [\d.]+ s after it came back", out)
    assert "redis: not waiting for the recovery job (smoke mode)" in out
    down = re.search(r"sent while it was down (\{.*?\}); first 2xx [\d.]+ s after", out)
    assert down and set(ast.literal_eval(down.group(1))) <= {503}
    assert re.search(r"postgres: all \d+ accepted adds extracted [\d.]+ s .*; stored twice 0", out)
    assert SMOKE_NOTE in out


# --- Retrieval quality: toy datasets in the benchmarks' own shapes (../shared/bench-data/README.md)


def _locomo_conversation(sample_id: str, sessions: list[list[dict]], qa: list[dict]) -> dict:
    dates = ["1:56 pm on 8 May, 2023", "10:02 am on 20 May, 2023"]
    conversation: dict = {"speaker_a": "Ada", "speaker_b": "Bo"}
    for number, (date, turns) in enumerate(zip(dates, sessions, strict=False), start=1):
        conversation |= {f"session_{number}_date_time": date, f"session_{number}": turns}
    return {"sample_id": sample_id, "conversation": conversation, "qa": qa}


# LoCoMo's first five conversations are its dev split, the rest its test split. In both asked
# conversations no word of a question (stop words aside) is said anywhere but in its evidence
# turn, so BM25 finds that turn's exchange and nothing else.
LOCOMO_DEV = [
    _locomo_conversation(
        "toy-dev-1",
        [
            [
                {"speaker": "Ada", "dia_id": "D1:1", "text": "Our lighthouse tour starts at noon."},
                {"speaker": "Bo", "dia_id": "D1:2", "text": "Bring a jacket."},
            ],
            [
                {"speaker": "Bo", "dia_id": "D2:1", "text": "How was the weekend?"},
                {
                    "speaker": "Ada",
                    "dia_id": "D2:2",
                    "text": "I knitted a crimson scarf.",
                    "blip_caption": "a photo of a red scarf",
                },
            ],
        ],
        [
            {
                "question": "When does the lighthouse tour start?",
                "answer": "noon",
                "evidence": ["D1:1"],
                "category": 2,
            },
            {
                "question": "What colour is the knitted scarf?",
                "answer": "crimson",
                "evidence": ["D2:2"],
                "category": 4,
            },
        ],
    ),
    *(
        _locomo_conversation(
            f"toy-dev-{number}",
            [[{"speaker": "Ada", "dia_id": "D1:1", "text": "Hello."}]],
            [{"question": "Who said hello?", "answer": "Ada", "evidence": ["D1:1"], "category": 1}],
        )
        for number in range(2, 6)
    ),
]
LOCOMO_TEST = [
    {
        "sample_id": "toy-1",
        "conversation": {
            "speaker_a": "Ada",
            "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ada", "dia_id": "D1:1", "text": "I repainted my sailboat vermilion."},
                {"speaker": "Bo", "dia_id": "D1:2", "text": "That sounds lovely."},
                {"speaker": "Ada", "dia_id": "D1:3", "text": "My cousin's greyhound is Pixel."},
                {"speaker": "Bo", "dia_id": "D1:4", "text": "Dogs are good company."},
            ],
            "session_2_date_time": "10:02 am on 20 May, 2023",
            "session_2": [
                {
                    "speaker": "Ada",
                    "dia_id": "D2:1",
                    "text": "We baked sourdough for the village fair.",
                    "blip_caption": "a photo of bread",
                },
                {"speaker": "Bo", "dia_id": "D2:2", "text": "Good luck!"},
            ],
        },
        "qa": [
            {
                "question": "Which colour was the sailboat repainted?",
                "answer": "vermilion",
                "evidence": ["D1:1"],
                "category": 4,
            },
            {
                "question": "What did they bake for the village fair?",
                "answer": "sourdough",
                "evidence": ["D02:01"],
                "category": 2,
            },
        ],
    }
]
LOCOMO = LOCOMO_DEV + LOCOMO_TEST


def _longmemeval_entry(
    question_id: str, question_type: str, question: str, sessions: list[list[dict]], gold: str
) -> dict:
    return {
        "question_id": question_id,
        "question_type": question_type,
        "question": question,
        "answer": "-",
        "question_date": "2023/05/30 (Tue) 10:00",
        "haystack_dates": [
            f"2023/05/{20 + day} (Sat) 09:{day:02d}" for day in range(len(sessions))
        ],
        "haystack_session_ids": [f"{question_id}-s{index}" for index in range(len(sessions))],
        "haystack_sessions": sessions,
        "answer_session_ids": [f"{question_id}-s{gold}"],
    }


def _turns(user: str, assistant: str, *, answer_in: str | None = None) -> list[dict]:
    return [
        {"role": "user", "content": user, "has_answer": answer_in == "user"},
        {"role": "assistant", "content": assistant, "has_answer": answer_in == "assistant"},
    ]


def _longmemeval_toys(prefix: str, *, soup_reply: str) -> list[dict]:
    """A scored question, one the official rules do not score, and an abstention question."""
    return [
        # Four sessions, the gold one third: a smoke run tells the user three, and keeps the gold.
        _longmemeval_entry(
            f"{prefix}user",
            "single-session-user",
            "What breed is the puppy I adopted?",
            [
                _turns("Suggest a lentil soup recipe.", soup_reply),
                _turns("How do I fix a squeaky hinge?", "A drop of oil usually does it."),
                _turns("I adopted a corgi puppy!", "Congratulations.", answer_in="user"),
                _turns("Is it going to rain on Friday?", "Take an umbrella."),
            ],
            gold="2",
        ),
        # The answer is in an assistant turn: not scored by the official rules, asked all the same.
        _longmemeval_entry(
            f"{prefix}assistant",
            "single-session-assistant",
            "Which museum did you recommend?",
            [
                _turns("Where should I go in Lisbon?", "The tile museum.", answer_in="assistant"),
                _turns("What is a good stretch for my back?", "Try the cat-cow pose."),
            ],
            gold="0",
        ),
        _longmemeval_entry(
            f"{prefix}user_abs",
            "single-session-user",
            "What is my cat called?",
            [_turns("I like tea.", "Noted.")],
            gold="0",
        ),
    ]


# sample60, the dev split. An assistant turn outside the gold session holds the question's words:
# the reference, which reads user turns only (the official rule), must not rank it first.
SOUP_REPLY_DEV = "Lentils and stock; your adopted puppy's breed may beg for some."
LONGMEMEVAL = _longmemeval_toys("toy-", soup_reply=SOUP_REPLY_DEV)
# more100, the test split: the question's words are in the gold session only.
LONGMEMEVAL_TEST = _longmemeval_toys("toy-test-", soup_reply="Lentils, carrots, cumin and stock.")


def _datasets_write(directory: Path) -> None:
    (directory / "locomo").mkdir()
    (directory / "locomo" / "locomo10.json").write_text(json.dumps(LOCOMO))
    (directory / "longmemeval").mkdir()
    for name, entries in (("sample60", LONGMEMEVAL), ("more100", LONGMEMEVAL_TEST)):
        path = directory / "longmemeval" / f"longmemeval_s_cleaned_{name}.json.gz"
        with gzip.open(path, "wt") as handle:
            json.dump(entries, handle)


def _all_questions_table(out: str, title: str) -> dict[str, dict[str, float]]:
    """A dataset's "all questions" table as printed: method -> column -> figure."""
    section = out.split(f"\n== {title}", 1)[1].split("\n== ", 1)[0]
    lines = section.split("\n  all questions\n", 1)[1].splitlines()
    columns = lines[0].split()[2:]  # after "method" and "n"
    table = {}
    for line in lines[1:]:
        match = re.fullmatch(rf" {{4}}(\w+) +(\d+)((?: +(?:{SCORE}))+)", line)
        if match is None:
            break
        table[match.group(1)] = dict(zip(columns, map(float, match.group(3).split()), strict=True))
        table[match.group(1)]["n"] = int(match.group(2))
    return table


def _against_reference(out: str, title: str) -> dict[str, tuple[float, str, float, str]]:
    """A dataset's verdict lines: lane -> (its figure, >= or <, the reference's, ok or BELOW)."""
    section = out.split(f"\n== {title}", 1)[1].split("\n== ", 1)[0]
    lines = re.findall(
        rf"^ {{4}}(\w+) ({SCORE}) (>=|<) reference ({SCORE}): (ok|BELOW)$", section, re.M
    )
    return {
        lane: (float(value), sign, float(reference), word)
        for lane, value, sign, reference, word in lines
    }


def test_retrieval_quality_scores_both_datasets_through_add_and_search(
    smoke_argv, worker, tmp_path, capsys
) -> None:
    _datasets_write(tmp_path)
    json_out = tmp_path / "figures.json"

    argv = [*smoke_argv, "--data-dir", str(tmp_path), "--json-out", str(json_out)]
    assert retrieval_quality.main(argv) == 0

    out = capsys.readouterr().out
    for title, scored, goal in (
        ("LoCoMo, test split, session pattern:", 2, "any@10"),
        ("LongMemEval-S, test split, session pattern:", 1, "any@5"),
    ):
        table = _all_questions_table(out, title)
        assert set(table) == {"bm25", "embedding", "hybrid", "reference"}
        for figures in table.values():
            assert figures.pop("n") == scored
            assert all(0 <= value <= 1 for value in figures.values())
        # The evidence is the only exchange holding the question's words.
        assert table["bm25"]["any@1"] == 1.0
        # So too the server's default, hybrid through the calibrated gate: the evidence has
        # BM25's best score (1.0 in the fusion), what the vector lane alone found 0.6 x its
        # similarity at most, and the gate keeps BM25's top 3 whatever their similarity.
        assert table["hybrid"]["any@1"] == 1.0
        # The bench's own BM25 over the same units: the evidence is the only unit with them.
        assert table["reference"]["any@1"] == table["reference"]["ndcg@10"] == 1.0
        # A toy haystack has fewer than 20 units: a lane that returns every memory has them all.
        assert table["embedding"]["any@20"] == 1.0
        # Each lane beside the reference on the dataset's goal metric, as the tables show them.
        verdicts = _against_reference(out, title)
        assert set(verdicts) == {"bm25", "embedding", "hybrid"}
        for lane, (value, sign, reference, word) in verdicts.items():
            assert (value, reference) == (table[lane][goal], table["reference"][goal])
            assert (sign, word) == ((">=", "ok") if value >= reference else ("<", "BELOW"))
        assert verdicts["hybrid"] == (1.0, ">=", 1.0, "ok")
    assert "not scored, no answer session has a user turn marked has_answer: 1" in out
    assert SMOKE_NOTE in out
    # The test split: LoCoMo's sixth conversation, LongMemEval-S's more100 file.
    figures = json.loads(json_out.read_text())
    assert figures["split"] == "test"
    asked = {
        name: {question["id"] for question in dataset["methods"]["hybrid"]["questions"]}
        for name, dataset in figures["datasets"].items()
    }
    assert asked == {
        "locomo": {"toy-1#0", "toy-1#1"},
        "longmemeval": {"toy-test-user", "toy-test-assistant"},
    }
    # The reference ranks what the server was told: the smoke run's three of four sessions.
    [reference] = [
        question["ranked"]
        for question in figures["datasets"]["longmemeval"]["reference"]["questions"]
        if question["id"] == "toy-test-user"
    ]
    assert reference == ["toy-test-user-s2", "toy-test-user-s0", "toy-test-user-s1"]
    per_category = re.findall(r"^ {4}category +n +(.*)$", out, re.MULTILINE)
    assert [header.split() for header in per_category] == [
        ["bm25", "embedding", "hybrid", "reference"]
    ] * 2


def _turns_sent(user_id: str) -> list[tuple[str, str, dict, str]]:
    """The user's stored messages, in the order stored: role, text, tags, date."""
    return [
        (message.role, message.text, message.filter_tags, f"{message.occurred_at:%Y-%m-%dT%H:%MZ}")
        for message in Message.objects.filter(end_user__user_id=user_id).order_by("id")
    ]


def test_retrieval_quality_turns_pattern_adds_one_turn_at_a_time_without_session_ids(
    smoke_argv, worker, tmp_path, capsys
) -> None:
    _datasets_write(tmp_path)
    argv = [*smoke_argv, "--data-dir", str(tmp_path), "--split", "dev", "--client-pattern", "turns"]
    first, again = tmp_path / "first.json", tmp_path / "again.json"

    assert retrieval_quality.main([*argv, "--run-id", "t1", "--json-out", str(first)]) == 0
    out = capsys.readouterr().out

    # One message per turn, role user, the speaker in the text, each dated and tagged with its
    # haystack session, all in the user's default conversation. A smoke run tells LongMemEval's
    # toy-user its first three sessions (the gold one among them).
    session_1, session_2 = {"session": "session_1"}, {"session": "session_2"}
    assert _turns_sent("rq-t1-turns-locomo-toy-dev-1") == [
        ("user", "Ada: Our lighthouse tour starts at noon.", session_1, "2023-05-08T13:56Z"),
        ("user", "Bo: Bring a jacket.", session_1, "2023-05-08T13:56Z"),
        ("user", "Bo: How was the weekend?", session_2, "2023-05-20T10:02Z"),
        (
            "user",
            "Ada: I knitted a crimson scarf. [image: a photo of a red scarf]",
            session_2,
            "2023-05-20T10:02Z",
        ),
    ]
    s0, s1, s2 = ({"session": f"toy-user-s{index}"} for index in range(3))
    assert _turns_sent("rq-t1-turns-lme-toy-user") == [
        ("user", "user: Suggest a lentil soup recipe.", s0, "2023-05-20T09:00Z"),
        ("user", f"assistant: {SOUP_REPLY_DEV}", s0, "2023-05-20T09:00Z"),
        ("user", "user: How do I fix a squeaky hinge?", s1, "2023-05-21T09:01Z"),
        ("user", "assistant: A drop of oil usually does it.", s1, "2023-05-21T09:01Z"),
        ("user", "user: I adopted a corgi puppy!", s2, "2023-05-22T09:02Z"),
        ("user", "assistant: Congratulations.", s2, "2023-05-22T09:02Z"),
    ]
    named = Session.objects.filter(end_user__user_id__startswith="rq-t1-", session_id__isnull=False)
    assert not named.exists()

    for title, scored in (
        ("LoCoMo, dev split, turns pattern:", 2),
        ("LongMemEval-S, dev split, turns pattern:", 1),
    ):
        table = _all_questions_table(out, title)
        assert {name: figures.pop("n") for name, figures in table.items()} == dict.fromkeys(
            ("bm25", "embedding", "hybrid", "reference"), scored
        )
        assert all(0 <= value <= 1 for figures in table.values() for value in figures.values())
        # On LongMemEval the question's words are also in an assistant turn of another session.
        assert table["reference"]["any@1"] == 1.0
        # The evidence's episode holds the question's words: BM25 finds it and the calibrated
        # gate keeps BM25's top 3, so the server's default has it among its first few turns
        # (its first only where the episode cites the evidence first).
        assert table["hybrid"]["any@10"] == 1.0
        # Every stored id maps back to its turn: every turn is cited (each is in an episode),
        # and a lane that returns every memory finds every unit.
        section = out.split(f"\n== {title}", 1)[1]
        cited = re.search(r"turns cited: by an episodic memory (\d+) of (\d+)", section)
        assert cited[1] == cited[2]
        assert table["embedding"]["any@20"] == 1.0
    figures = json.loads(first.read_text())
    assert (figures["split"], figures["client_pattern"]) == ("dev", "turns")
    asked = {
        name: {question["id"] for question in dataset["methods"]["hybrid"]["questions"]}
        for name, dataset in figures["datasets"].items()
    }
    assert asked == {
        "locomo": {"toy-dev-1#0", "toy-dev-1#1"},
        "longmemeval": {"toy-user", "toy-assistant"},
    }

    # --skip-ingest: the turns' ids, which the default conversation cannot list, are read back
    # from the memories that cite them; the same searches rank the same units.
    argv += ["--run-id", "t1", "--skip-ingest", "--json-out", str(again)]
    assert retrieval_quality.main(argv) == 0
    reread = json.loads(again.read_text())
    for name, dataset in figures["datasets"].items():
        for method, scores in dataset["methods"].items():
            ranked = [q["ranked"] for q in reread["datasets"][name]["methods"][method]["questions"]]
            assert ranked == [question["ranked"] for question in scores["questions"]]


def test_retrieval_quality_turn_ids_pattern_tags_each_turn_with_its_own_id(
    smoke_argv, worker, tmp_path, capsys
) -> None:
    _datasets_write(tmp_path)
    argv = [*smoke_argv, "--data-dir", str(tmp_path), "--split", "dev"]
    argv += ["--dataset", "locomo", "--client-pattern", "turn-ids", "--run-id", "t2"]

    assert retrieval_quality.main(argv) == 0
    out = capsys.readouterr().out

    # As the turns pattern sends them, each turn's tags also naming the turn (its dia_id).
    sent = _turns_sent("rq-t2-turn-ids-locomo-toy-dev-1")
    assert [tags for _role, _text, tags, _date in sent] == [
        {"session": "session_1", "message_id": "D1:1"},
        {"session": "session_1", "message_id": "D1:2"},
        {"session": "session_2", "message_id": "D2:1"},
        {"session": "session_2", "message_id": "D2:2"},
    ]
    # Turns that differ only in their own ids share episodes (memory.tags): whether the worker
    # read them together or one at a time, a reply's episode holds what it answers.
    user = "rq-t2-turn-ids-locomo-toy-dev-1"
    replies = Message.objects.filter(end_user__user_id=user, text__startswith="Bo: Bring")
    episode = EpisodicMemory.objects.get(source_message_ids__contains=[replies.get().pk])
    assert "Ada: Our lighthouse tour starts at noon." in episode.details
    table = _all_questions_table(out, "LoCoMo, dev split, turn-ids pattern:")
    assert table["hybrid"]["any@10"] == 1.0


# --- Fairness ------------------------------------------------------------------------------------


def test_fairness_times_a_light_tenants_adds_beside_a_heavy_import(
    smoke_argv, other_org: TenantFixture, worker, tmp_path, capsys
) -> None:
    _datasets_write(tmp_path)
    argv = [*smoke_argv, "--light-api-key", other_org.key, "--data-dir", str(tmp_path)]

    assert fairness.main(argv) == 0

    out = capsys.readouterr().out
    # The toy haystacks hold fewer turns than a smoke run's --turns: all are imported.
    imported = [entry for entry in LONGMEMEVAL if not entry["question_id"].endswith("_abs")]
    sessions = [session for entry in imported for session in entry["haystack_sessions"]]
    turns = sum(len(session) for session in sessions)
    assert f"{len(imported)} users, {len(sessions)} adds (one per session), {turns} turns" in out
    assert re.search(r"first add to last turn processed: [\d.]+ s -> [\d.]+ turns/s", out)
    assert "(failed messages: 0)" in out
    adds = int(re.search(r"light tenant \(one exchange every [\d.]+ s, (\d+) adds\)", out)[1])
    assert adds >= 1
    assert re.search(r"add to searchable +p50 +[\d.]+ s +p95 +[\d.]+ s +max +[\d.]+ s", out)
    assert SMOKE_NOTE in out
    # The light tenant's user is the other organization's.
    [light] = EndUser.objects.filter(user_id__endswith="-light")
    assert light.organization_id == other_org.organization.pk


# --- Retrieval latency ----------------------------------------------------------------------------


def test_retrieval_latency_counts_a_row_tied_with_the_tenth_as_found() -> None:
    # Exact ranks: rows 1..12 at distances 0.1..1.2, row 11 tied with row 10 in the last bits.
    nearest = [(row, row / 10) for row in range(1, 13)]
    nearest[10] = (11, 1.0 + 1e-9)
    recall = retrieval_latency._recall
    assert recall(list(range(1, 11)), nearest, higher_first=False) == 1.0
    assert recall([*range(1, 10), 11], nearest, higher_first=False) == 1.0  # the tie
    assert recall([*range(1, 10), 12], nearest, higher_first=False) == 0.9
    assert recall([99], nearest, higher_first=False) == 0.0  # not among the exact 40
    assert recall([], [], higher_first=False) is None
    scores = [(row, 10.0 - row) for row in range(1, 13)]  # BM25: higher first
    assert recall([*range(1, 10), 12], scores, higher_first=True) == 0.9
    scores[10] = (11, scores[9][1])
    assert recall([*range(1, 10), 11], scores, higher_first=True) == 1.0


def test_retrieval_latency_draws_only_queries_the_server_searches() -> None:
    # About 1 in 115 word-salad queries has no topic word ("of said of", "the its up new for
    # the and"): the server answers it with the newest memories, which no lane ranked, so the
    # smoke run's lane checks (16 queries) found a recall below 1 in about 1 run in 8.
    queries = retrieval_latency.QuerySource(Vocabulary.load(), "seed").take(2000)
    assert [query for query in queries if not content_terms(query)] == []


def test_retrieval_latency_measures_both_layouts_and_deletes_its_users(
    smoke_argv, tmp_path, capsys, monkeypatch
) -> None:
    # Every other query names a time, as about 1 in 200 drawn from the vocabulary do ("the of
    # april"): the lane checks still compare each lane alone with its exact scan.
    take = retrieval_latency.QuerySource.take

    def some_naming_a_time(self, count: int) -> list[str]:
        return [
            f"{query} in april" if index % 2 else query
            for index, query in enumerate(take(self, count))
        ]

    monkeypatch.setattr(retrieval_latency.QuerySource, "take", some_naming_a_time)
    assert retrieval_latency.main([*smoke_argv, "--data-dir", str(tmp_path)]) == 0

    out = capsys.readouterr().out
    rows = re.findall(rf"^(.{{30}}) .*?({RECALL}) +/ +({RECALL}) +(?:NOT )?met$", out, re.MULTILINE)
    labels = [label.strip() for label, _vector, _bm25 in rows]
    assert labels[0] == "single (exact scan)"
    assert labels[1] == "spread"
    assert len(labels) > 2  # the spread layout's size buckets
    # Every smoke user is under the exact-scan line, where the server's lanes and the bench's
    # exact scans rank the same rows.
    for lane in (1, 2):  # vector, BM25
        recalls = {row[lane] for row in rows}
        assert "1.000" in recalls
        assert recalls <= {"1.000", "-"}
    assert re.search(
        r"^client p95 \(goal <= 40 ms\): single \(exact scan\) [\d.]+ ms; spread [\d.]+ ms$",
        out,
        re.MULTILINE,
    )
    assert re.search(
        r"goal, search p95 at 200 memories: single \(exact scan\) [\d.]+ ms \(<= 30\) (NOT )?met; "
        r"spread [\d.]+ ms \(<= 20\) (NOT )?met$",
        out,
        re.MULTILINE,
    )
    assert SMOKE_NOTE in out
    # Each layout's figures are printed when it ends: a run stopped in the next keeps them.
    before_spread = out[: out.index("\n[spread] ")]
    assert "[single] done" in before_spread
    assert re.search(r"^single \(exact scan\) .*met$", before_spread, re.MULTILINE)

    assert not EndUser.objects.filter(user_id__startswith="lat-").exists()
    assert not MEMORY_TYPES["episodic"].model.objects.exists()


def test_a_kept_run_is_measured_again_and_its_bm25_lane_from_segments_and_postings(
    smoke_argv, org: TenantFixture, tmp_path, capsys, settings
) -> None:
    argv = [*smoke_argv, "--data-dir", str(tmp_path), "--layouts", "single", "--keep"]
    assert retrieval_latency.main(argv) == 0
    [user] = EndUser.objects.filter(user_id__startswith="lat-").values_list("user_id", flat=True)
    episodic = MEMORY_TYPES["episodic"].model.objects
    assert episodic.count() == 200
    capsys.readouterr()

    # Measured again as they are: nothing loaded, nothing deleted.
    run = user.removeprefix("lat-").removesuffix("-single-0")
    assert retrieval_latency.main([*smoke_argv, "--data-dir", str(tmp_path), "--again", run]) == 0
    out = capsys.readouterr().out
    assert f"(kept run {run}, not loaded)" in out
    assert "loaded" not in out.replace("not loaded", "")
    assert re.search(r"^single \(exact scan\) .*met$", out, re.MULTILINE)
    assert re.search(r"goal, search p95 at 200 memories: single", out)
    assert list(
        EndUser.objects.filter(user_id__startswith="lat-").values_list("user_id", flat=True)
    ) == [user]
    assert episodic.count() == 200

    lane_argv = ["--api-key", org.key, "--smoke", "--data-dir", str(tmp_path)]
    # The smoke user's 200 memories are under the shipped line: the bench says so.
    assert bm25_lane.main([*lane_argv, "--user", user]) == 1
    assert "fewer than an owner keeps segments with" in capsys.readouterr().err

    settings.BM25_SEGMENT_MIN_DOCUMENTS = 100
    assert bm25_lane.main([*lane_argv, "--user", user]) == 0

    out = capsys.readouterr().out
    assert re.search(r"^built the segments of 200 documents \(client \S+\) in [\d.]+ s$", out, re.M)
    assert SegmentCover.objects.get(end_user__user_id=user).ready
    rows = re.findall(r"^every query +(\w+) +n +(\d+) +p50 +[\d.]+ ms +p95 +[\d.]+ ms", out, re.M)
    assert rows == [("segments", "8"), ("postings", "8")]
    assert "rankings differing: 0 of 8" in out
    assert SMOKE_NOTE in out


def _loaded_tables_schema() -> set[tuple]:
    """Every index and constraint of the tables a bench load writes, as the database has them."""
    tables = [model._meta.db_table for model in memories_load.loaded_models(_searched())]
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = ANY(%s)", [tables]
        )
        indexes = set(cursor.fetchall())
        cursor.execute(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid), convalidated "
            "FROM pg_constraint WHERE conrelid = ANY(%s::regclass[])",
            [tables],
        )
        return indexes | set(cursor.fetchall())


def _searched() -> SearchableKind:
    return memories_load.searched_kind()


def _recorded() -> bool:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [memories_load.DEFERRED_TABLE])
        return cursor.fetchone()[0] is not None


def test_a_big_load_drops_the_loaded_tables_indexes_and_makes_every_one_again(
    transactional_db: None, capsys
) -> None:
    kind = _searched()
    before = _loaded_tables_schema()
    names = {item[0] for item in before if len(item) == 2}
    assert {"episodicembedding_hnsw", "posting_user_term", "term_stats_unique"} <= names

    with memories_load.indexes_deferred(kind):
        inside = _loaded_tables_schema()
        assert _recorded()
    dropped = before - inside
    # The shared index the model declares goes; users' own indexes and other models' shared ones
    # (left by earlier tests) stay: a load writes none of their rows.
    assert "episodicembedding_hnsw" not in {item[0] for item in inside if len(item) == 2}
    assert any(len(item) == 4 and "FOREIGN KEY" in item[2] for item in dropped)
    assert not any(len(item) == 2 and item[0].endswith("pkey") for item in dropped)
    assert _loaded_tables_schema() == before
    assert not _recorded()

    # A run killed inside leaves its record: the next run makes what it names again first.
    items = memories_load.deferrable(kind)
    memories_load._deferred_record(items)
    with connections["default"].cursor() as cursor:
        for item in (items[0], items[-1]):  # a unique constraint, the shared HNSW index
            cursor.execute(item.drop())
    assert _loaded_tables_schema() != before
    with memories_load.indexes_deferred(kind):
        pass
    assert "an interrupted run left" in capsys.readouterr().out
    assert _loaded_tables_schema() == before
    assert not _recorded()


# --- The admin's dashboard -----------------------------------------------------------------------


def test_dashboard_times_the_page_against_a_plain_one_and_deletes_what_it_made(
    smoke_argv, tmp_path, capsys
) -> None:
    assert dashboard.main([*smoke_argv, "--data-dir", str(tmp_path)]) == 0

    out = capsys.readouterr().out
    assert re.search(
        r"roll-up: from scratch \d+ ms \([1-9][\d,]* figures\), again \d+ ms \([\d,]+ figures",
        out,
    )
    for path in ("/admin/", "/admin/password_change/"):
        assert re.search(
            rf"^GET {re.escape(path)} +p50 +[\d.]+ ms +p95 +[\d.]+ ms +max +[\d.]+ ms +"
            r"\(4 requests\)$",
            out,
            re.MULTILINE,
        )
    assert re.search(r"goal, dashboard p95 < 500 ms at 200 memories: [\d.]+ ms (NOT )?met", out)
    statements = int(re.search(r"SQL statements of one page load: (\d+)", out).group(1))
    assert 0 < statements <= 40  # the console's own test bounds the page at 40
    for part in ("Dashboard()", "memory.admin panels", "skills.admin.dashboard panels"):
        assert re.search(rf"^  {re.escape(part)}.* +[\d.]+ ms$", out, re.MULTILINE)
    assert "load average before: " in out and "load average after: " in out
    assert SMOKE_NOTE in out

    # Its user and every row loaded for them, and its operator, are gone; the figures were
    # rolled up again without them.
    assert not EndUser.objects.filter(user_id__startswith="dash-").exists()
    assert not MEMORY_TYPES["episodic"].model.objects.exists()
    assert not RetrievalLog.objects.exists()
    assert not Session.objects.exists() and not Recommendation.objects.exists()
    assert not Skill.objects.exists() and not LearningRun.objects.exists()
    assert not get_user_model().objects.filter(username__startswith="dashbench-").exists()
    assert DailyFigure.objects.filter(series="retrievals", key="count", value__gt=0).count() == 0


# --- Experiences ------------------------------------------------------------------------------


def test_experiences_records_both_ways_waits_for_embeddings_and_times_the_queries(
    smoke_argv, worker, tmp_path, capsys
) -> None:
    json_out = tmp_path / "figures.json"

    assert experiences.main([*smoke_argv, "--json-out", str(json_out)]) == 0

    out = capsys.readouterr().out
    # The generator's exact 60 / 30 / 10 % outcomes.
    assert "200 experiences (" in out
    assert "{'success': 120, 'partial': 20, 'failure': 60}" in out
    assert re.search(r"POST /experiences \(single\) .* statuses \{201: 40\}", out)
    assert re.search(r"POST /experiences \(40 each\) .* statuses \{201: 4\}", out)
    assert re.search(r"recallable: 200 experiences stored and embedded [\d.]+ s after", out)
    assert re.search(r"^recommend p50 +[\d.]+ ms +- +-$", out, re.MULTILINE)
    assert re.search(r"^one task: recommend p50 +[\d.]+ ms +- +-$", out, re.MULTILINE)
    assert "Mimir: not run (no --mimir-python)" in out
    assert "recall: 8 queries of 1 side(s)" in out
    assert "goal, recommend p50 >= 3x Mimir's in-process: not measured (no --mimir-python)" in out
    assert re.search(r"a cache hit by design \(\d of 4 did\)", out)
    assert SMOKE_NOTE in out
    figures = json.loads(json_out.read_text())
    ours = figures["ours"]
    assert ours["record_single"]["count"] + ours["record_batch"]["count"] == 200
    assert ours["recall"]["n"] == ours["recommend"]["n"] == 8
    # The goal's figures leave out the queries whose embedding the server read from its cache.
    for kind in ("recall", "recommend"):
        assert ours[kind]["counted"] == 8 - ours[kind]["embed_cached"]
    # One task, both asked: half as many more queries, each recall then recommend, all counted.
    assert figures["data"]["pairs"] == 4
    assert ours["pairs"]["recall"]["counted"] == ours["pairs"]["recommend"]["counted"] == 4
    assert figures["mimir"] is None
    assert not EndUser.objects.filter(user_id__startswith="exbench-").exists()


def test_recommend_path_times_each_step_and_bounds_the_critical_path(
    smoke_argv, org: TenantFixture, tmp_path, capsys, similarity_gate_off: None
) -> None:
    # The bench draws its own tasks (its generated subjects and symptoms), unrelated to these
    # experiences: the shipped gate rightly finds nothing for most, and a recommend that finds
    # nothing skips the steps (grouping, the recommendation written) this times and checks.
    record_many(
        org,
        [
            {"task": f"the deploy of service {n} times out", "action": action, "outcome": outcome}
            for n, (action, outcome) in enumerate(
                [("raise the timeout", "success"), ("restart the pods", "failure")] * 4
            )
        ],
        user_id="path-user",
    )
    embed_all()

    argv = [*smoke_argv, "--user", "path-user", "--data-dir", str(tmp_path)]
    assert recommend_path.main(argv) == 0

    out = capsys.readouterr().out
    figures = dict(re.findall(r"^(\S[^\n]*?) +p50 +([\d.]+) ms$", out, re.MULTILINE))
    assert set(figures) == {
        "in-process recommend",
        "in-process after the search",
        "HTTP recommend",
        "HTTP authenticated request",
        "embed",
        "vector lane, recommend",
        "vector lane, recall",
        "BM25 lane, recommend",
    }
    [floor] = re.findall(r"^floor over HTTP +([\d.]+) ms", out, re.MULTILINE)
    assert float(floor) >= float(figures["embed"]) + float(figures["vector lane, recommend"])
    # Every recommend it made (four in-process, four over HTTP) recommended the fix that worked.
    assert set(Recommendation.objects.values_list("action", flat=True)) == {"raise the timeout"}
    assert Recommendation.objects.count() == 8
    assert SMOKE_NOTE in out


def test_experience_quality_scores_each_half_and_deletes_its_user(
    smoke_argv, worker, tmp_path, capsys
) -> None:
    json_out = tmp_path / "quality.json"

    assert experience_quality.main([*smoke_argv, "--json-out", str(json_out)]) == 0

    out = capsys.readouterr().out
    assert re.search(r"dev +recall@5 [\d.]+ MRR [\d.]+ \(\d+ cases\); recommend", out)
    figures = json.loads(json_out.read_text())
    assert set(figures) == {"dev", "test"}
    assert figures["dev"]["recall_cases"] + figures["test"]["recall_cases"] > 0
    assert not EndUser.objects.filter(user_id__startswith="exq-").exists()


def test_experience_quality_at_once_asks_before_and_after_the_worker_embeds(
    smoke_argv, worker, tmp_path, capsys
) -> None:
    json_out = tmp_path / "quality.json"

    assert experience_quality.main([*smoke_argv, "--at-once", "--json-out", str(json_out)]) == 0

    out = capsys.readouterr().out
    assert re.search(r"at once:\n +dev +recall@5 [\d.]+", out)
    assert re.search(r"embedded:\n +dev +recall@5 [\d.]+", out)
    figures = json.loads(json_out.read_text())
    assert set(figures) == {"at once", "embedded"}
    assert figures["at once"]["dev"]["embed_seconds"] is None
    assert figures["embedded"]["dev"]["embed_seconds"] is not None


# --- Images --------------------------------------------------------------------------------------


def test_images_times_inline_and_fetched_images_beside_text_only_adds(
    smoke_argv, worker, settings, tmp_path, capsys
) -> None:
    settings.MEDIA_ROOT = str(tmp_path)  # the stored images' files
    # Off the allow-list, the worker refuses localhost: the bench stops at its warm-up, and says
    # what to change.
    settings.IMAGE_FETCH_ALLOW_HOSTS = []
    assert images.main(smoke_argv) == 1
    refused = capsys.readouterr()
    assert "does not resolve to a public internet address" in refused.err
    assert "IMAGE_FETCH_ALLOW_HOSTS=localhost" in refused.err

    settings.IMAGE_FETCH_ALLOW_HOSTS = ["localhost"]
    assert images.main(smoke_argv) == 0

    out = capsys.readouterr().out
    adds, same = map(
        int, re.search(r"(\d+) two-turn adds a phase \((\d+) of the same", out).groups()
    )
    warmups = int(re.search(r"warm-up: (\d+) adds done", out)[1]) // 3
    rows = out.split("\nsummary", 1)[1].split("\nimage server:", 1)[0].splitlines()[2:]
    table = {row[:22].strip(): row.split()[-2] for row in rows}  # phase -> distinct images listed
    assert table == {
        "text only (before)": "0",
        "data URL, distinct": str(adds),
        "data URL, same image": "1",
        "loopback URL": str(adds),
        "text only (after)": "0",
    }
    assert re.search(rf"^data URL, same image .* statuses \{{202: {same}\}}$", out, re.M)
    assert len(re.findall(rf" statuses \{{202: {adds}\}}$", out, re.M)) == 4
    stored = re.search(rf"add to stored: {adds} images in [\d.]+ s .* -> ([\d.]+) images/s", out)
    assert float(stored[1]) > 0
    # One fetch per remote image, each image stored once, as one file (the refused run's inline
    # warm-up images, of the same seed, were these bytes too).
    served = re.search(r"image server: (\d+) requests for (\d+) distinct images .*, (\d+) the", out)
    requests, distinct, flushes = map(int, served.groups())
    assert requests == distinct == adds + warmups + flushes
    expected = 2 * (adds + warmups) + 1 + flushes
    assert f"images this run stored: {expected} distinct" in out
    assert ImageObject.objects.count() == expected
    assert len(list(tmp_path.rglob("*.png"))) == expected
    assert SMOKE_NOTE in out


# --- Skill learning ------------------------------------------------------------------------------

# MetaTool's shape (../shared/bench-data/README.md): requests per tool, a description per tool and
# the merged tools. Every request of a tool names its word ("weather", "stock", "recipe", "chess")
# and no word of a tool's requests and description (stop words aside) is another tool's, so the
# bench's BM25 over description and learned requests ranks the right tool first.
SKILL_TOOLS = {
    "WeatherTool": (
        "Provide you with the latest weather information.",
        [
            "Will the weather turn rainy in Lisbon tomorrow?",
            "What is the weather forecast for Oslo?",
            "Is stormy weather expected this weekend in Paris?",
            "How humid will the weather be in Madrid on Friday?",
            "Give the weather for Rome next week.",
            "Should I expect cold weather in Dublin?",
            "What weather is forecast for Berlin tonight?",
        ],
    ),
    "FinanceTool": (
        "Stock quotes and market news.",
        [
            "What is the Apple stock price?",
            "Show the Tesla stock chart.",
            "How did the Nasdaq stock index close?",
            "Quote the Microsoft stock dividend.",
            "What are Nvidia stock shares trading at?",
            "Compare the Amazon stock earnings.",
            "How volatile is the stock market today?",
        ],
    ),
    "RecipeFinder": (
        "Recipes and cooking ideas.",
        [
            "Find a vegan lasagna recipe.",
            "A recipe for sourdough bread, please.",
            "Suggest a recipe with chickpeas.",
            "What recipe uses leftover rice?",
            "Recommend a quick pancake recipe.",
            "A recipe to roast a chicken?",
            "Which recipe suits a curry night?",
        ],
    ),
    # Six requests: two asked, four left to learn from, fewer than a smoke run's five.
    "ChessCoach": (
        "A chess tutor.",
        [
            "Explain the Sicilian opening in chess.",
            "Analyse my chess endgame with two rooks.",
            "Which chess gambit beats the London system?",
            "Teach me chess checkmate patterns with a knight.",
            "Rate my chess blitz game as black.",
            "Solve this chess puzzle: mate in three.",
        ],
    ),
}


def _metatool_write(directory: Path) -> None:
    with (directory / "all_clean_data.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["Query", "Tool"])
        for tool, (_description, requests) in SKILL_TOOLS.items():
            writer.writerows([request, tool] for request in requests)
    descriptions = {tool.lower(): description for tool, (description, _) in SKILL_TOOLS.items()}
    (directory / "plugin_des.json").write_text(json.dumps(descriptions))
    merged = {tool: SKILL_TOOLS[tool][0] for tool in ("WeatherTool", "FinanceTool")}
    (directory / "big_tool_des.json").write_text(json.dumps(merged))


def _skill_table(out: str) -> dict[tuple[str, str], dict[str, float]]:
    """The figures table as printed: (method, half) -> "raw p@1" ... "merged MRR"."""
    columns = [
        f"{label} {metric}" for label in ("raw", "merged") for metric in ("p@1", "r@5", "MRR")
    ]
    table = {}
    for method, half, asked, cells in re.findall(
        rf"^(\w+) +(all|dev|test) +(\d+)((?: +(?:{SCORE})){{6}})$", out, re.MULTILINE
    ):
        table[method, half] = dict(zip(columns, map(float, cells.split()), strict=True))
        table[method, half]["asked"] = int(asked)
    return table


def test_skill_learning_learns_every_session_and_scores_retrieval_beside_the_baselines(
    smoke_argv, worker, tmp_path, capsys
) -> None:
    _metatool_write(tmp_path)
    json_out = tmp_path / "skills.json"

    # Paced: the sending pauses while 10 sessions are not learned yet.
    argv = [*smoke_argv, "--data-dir", str(tmp_path), "--json-out", str(json_out)]
    assert skill_learning.main([*argv, "--max-pending", "10"]) == 0

    out = capsys.readouterr().out
    assert "19 sessions of 4 tools" in out  # 5 + 5 + 5 + 4
    assert "1 tool(s) with fewer learned from all they had: ChessCoach 4" in out
    assert "groups of more than one tool: 0 (merged labels = raw labels)" in out
    assert re.search(
        r"close statuses \{200: 19\}; POST /learning-runs: "
        r"(run \d+ queued for the \d+ left over|run \d+ already queued, holding \d+"
        r"|none left over)",
        out,
    )
    assert re.search(r"sent in [\d.]+ s \([\d.]+ s of it paused for --max-pending 10\)", out)
    runs = re.search(
        r"learned: 19 sessions in (\d+) runs \{'succeeded': (\d+)\}, [\d.]+ s from .* "
        r"\(largest run (\d+) sessions, longest [\d.]+ s\)",
        out,
    )
    assert runs and runs[1] == runs[2]
    assert int(runs[3]) <= 10
    assert re.search(r"skills: 4 \(4 with exactly one tool; tools covered 4 of 4\)", out)
    assert re.search(r"asked: 8 test requests, POST /skills/retrieve limit 5, p50 [\d.]+ ms", out)
    table = _skill_table(out)
    methods = ["server", "bm25_desc_requests", "minilm_centroid", "bm25_desc", "minilm_desc"]
    assert set(table) == {(method, half) for method in methods for half in ("all", "dev", "test")}
    for (_method, half), figures in table.items():
        assert figures.pop("asked") == {"all": 8, "dev": 4, "test": 4}[half]
        assert all(0 <= value <= 1 for value in figures.values())
        # Every merged group here is one tool.
        for metric in ("p@1", "r@5", "MRR"):
            assert figures[f"raw {metric}"] == figures[f"merged {metric}"]
    assert table["bm25_desc_requests", "all"]["raw p@1"] == 1.0
    goal = re.search(
        r"goal, server p@1 >= 0\.75 at N=5: test half (\d\.\d{3}) (met|NOT met); "
        r"all (\d\.\d{3}) (met|NOT met)",
        out,
    )
    assert goal is not None
    assert float(goal[1]) == round(table["server", "test"]["raw p@1"], 3)
    assert float(goal[3]) == round(table["server", "all"]["raw p@1"], 3)
    # Each tool's requests, learned from and asked, share a word no other tool's has
    # (weather, stock, recipe, chess): the server's skill retrieval, its gate calibrated as
    # shipped, answers every one with its tool's skill first.
    assert table["server", "all"]["raw p@1"] == 1.0
    assert goal[2] == goal[4] == "met"
    assert SMOKE_NOTE in out
    [result] = json.loads(json_out.read_text())["results"]
    assert {row["tool"] for row in result["requests"]} == set(SKILL_TOOLS)
    assert sorted(tool for skill in result["skills"] for tool in skill["tools"]) == sorted(
        SKILL_TOOLS
    )
    assert not EndUser.objects.filter(user_id__startswith="skillbench-").exists()


def test_skill_families_learns_the_fix_and_never_recommends_a_fix_that_only_failed(
    smoke_argv, worker, tmp_path, capsys
) -> None:
    json_out = tmp_path / "families.json"
    assert skill_families.main([*smoke_argv, "--json-out", str(json_out)]) == 0

    out = capsys.readouterr().out
    assert "3 families, 9 sessions, 36 held-out requests" in out
    halves = json.loads(json_out.read_text())["halves"]
    assert set(halves) == {"all", "dev"}  # the smoke's three families are dev ones
    scores = halves["all"]
    assert scores["asked"] == 36
    # The tempting fixes failed in every session that tried them: no skill is filed under one
    # and recommend never names one.
    assert scores["skill_wrong"] == 0 and scores["recommend_failed_fix"] == 0
    # Three families apart: every request in new wording finds its family's fix as the first
    # skill (its pitfalls naming the tempting fix tried), while the outcome-blind baseline
    # names the tempting fix.
    assert scores["skill_hits"] == scores["pitfalls_named"] == 36
    assert scores["nearest_tempting"] == 36
    assert re.search(r"POST /skills/retrieve  p@1 1\.000  wrong@1 0\.000", out)
    # Recommend names the family's fix for every request but one, for which the shipped
    # similarity gate keeps no experience (found false; with the gate off, all 36): a list cut
    # short, issue 39 item 4. Tighten to 36 when the gate keeps it.
    assert (scores["recommend_hits"], scores["recommend_not_found"]) == (35, 1)
    assert re.search(r"accuracy 0\.972  recommended a failed fix 0  not found 1", out)
    assert not EndUser.objects.filter(user_id__startswith="skillfamilies-").exists()


def _webarena_write(path: Path) -> None:
    """Three toy template families in WebArena's ``test.raw.json`` shape, and a template with too
    few tasks to be a family."""
    templates = {
        1: ("Show me the {{n}} most recent orders", [3, 5, 7, 9]),
        2: ("Thumbs down the top post in {{forum}}", ["books", "movies", "gadgets", "history"]),
        3: ("Open the merge request about {{topic}}", ["login", "docs", "ci", "fonts"]),
        4: ("Star the {{repo}} repository", ["a11y", "ranger"]),
    }
    records = []
    for template_id, (template, values) in templates.items():
        slot = template.split("{{")[1].split("}}")[0]
        for value in values:
            records.append(
                {
                    "task_id": len(records),
                    "sites": ["shopping"],
                    "intent_template_id": template_id,
                    "intent_template": template,
                    "instantiation_dict": {slot: value},
                    "intent": template.replace("{{" + slot + "}}", str(value)),
                }
            )
    path.write_text(json.dumps(records))


def test_task_families_learns_all_but_one_of_each_family_and_asks_it_beside_the_floor(
    smoke_argv, worker, tmp_path, capsys
) -> None:
    data, json_out = tmp_path / "test.raw.json", tmp_path / "families.json"
    _webarena_write(data)
    argv = [*smoke_argv, "--data", str(data), "--lanes", "--json-out", str(json_out)]
    assert task_families.main(argv) == 0

    out = capsys.readouterr().out
    assert "3 families of >= 4 tasks, 9 sessions, 3 held out" in out
    document = json.loads(json_out.read_text())
    assert document["census"] == {
        "skills": 3,
        "holding two families' tools": 0,
        "families with a skill": 3,
    }
    answers = document["answers"]
    assert len(answers) == 6  # each held-out task, plain and masked
    assert {answer["mode"] for answer in answers} == {"plain", "masked"}
    for answer in answers:
        assert set(answer["skills"]) == {"hybrid", "bm25", "embedding"}
        if answer["mode"] == "masked":
            assert "…" in answer["request"]
    # Three families of distinct words: the floor and the skills find every one.
    assert all(answer["floor_tool"] == answer["tool"] for answer in answers)
    assert all(answer["skills"]["hybrid"][0] == [answer["tool"]] for answer in answers)
    assert re.search(r"^all  plain  n   3  skills hybrid 1\.000 .* BM25 floor 1\.000$", out, re.M)
    assert not EndUser.objects.filter(user_id__startswith="taskfamilies-").exists()


@pytest.mark.django_db(transaction=False)
def test_embedding_runtime_times_both_runtimes_on_turns_and_finds_their_vectors_alike(
    settings, tmp_path, capsys
) -> None:
    haystack = [
        [{"role": "user", "content": f"Turn {n} of the talk about the lake."}] for n in range(8)
    ]
    data = tmp_path / "haystack.json.gz"
    with gzip.open(data, "wt") as file:
        json.dump([{"haystack_sessions": haystack}], file)

    argv = ["--smoke", "--data", str(data), "--model-dir", str(settings.LOCAL_MODEL_DIR)]
    assert embedding_runtime.main(argv) == 0

    out = capsys.readouterr().out
    assert SMOKE_NOTE in out
    [apart] = re.findall(r"largest difference between the runtimes' vectors: (\S+)", out)
    assert float(apart) < 1e-4
    rows = re.findall(
        r"^\| (onnxruntime|sentence-transformers) \| [\d.]+ ms \| [\d.]+ ms \|", out, re.M
    )
    assert rows == ["onnxruntime", "sentence-transformers"]
