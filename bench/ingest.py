"""Ingest throughput: accepted ``POST /memory/add`` per second, and messages per second from the
add until the worker has stored their memories (with embeddings) and so made them searchable.

1. Add phase: ``--threads`` keep-alive connections send ``--adds`` two-turn adds (a user turn
   and an assistant turn of 10-30 words each, generated from word lists with a seeded random;
   a few carry a URL or an email address so resource and knowledge-vault extraction run too),
   spread over ``--users`` bench users with ``--sessions`` sessions each. A user's adds all go
   through one connection, in order, as one user's conversation would. Every answer must be
   202: the adds per second and the p50/p95 latency of the accepted adds are reported.
2. Add to searchable: the deterministic extractor (``LLM_PROVIDER=none``) stores exactly one
   episodic memory per user → assistant exchange, in the same transaction that stores the
   memories' embeddings and marks the messages processed. So a user's work is done when the
   ``counts.episodic`` of ``GET /memory/components?user_id=U&memory_type=episodic&limit=1``
   reaches the number of adds sent to that user. One sweep over the users right after the last
   add shows how much the worker kept up while adds were arriving; sweeps every
   ``--poll-interval`` seconds over the users not done yet then time the backlog drain. The
   end-to-end figure is 2 x adds / (moment the last user was seen done - first add sent).

Before measuring, each thread sends ``--warmup`` adds to a warm-up user of its own and waits
until they are processed, so gunicorn's workers and the Celery worker (embedding model loaded)
are warm. Users are named ``bench-<UTC time>-<n>``, so repeated runs do not collide.

Run against a live server started with the rate limit raised (one key sends every add):

    API_RATE_LIMIT=10000000/min make run
    .venv/bin/python -m bench.ingest [--base-url URL] [--api-key KEY] [--adds 20000]
        [--threads 4] [--users 100] [--sessions 3] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from bench.common import (
    PROGRESS_EVERY_SECONDS,
    RATE_LIMIT_HINT,
    SMOKE_NOTE,
    BenchError,
    KeepAliveClient,
    LoadResult,
    api_key_read,
    arguments_parse,
    episodic_count,
    run_load,
    server_arguments,
    verdict,
)

GOAL_ADDS_PER_SECOND = 250.0
GOAL_P95_MS = 50.0
GOAL_MESSAGES_PER_SECOND = 100.0
SMOKE = {
    "adds": 24,
    "threads": 2,
    "users": 4,
    "sessions": 2,
    "warmup": 2,
    "poll_interval": 0.2,
    "stall_seconds": 60.0,
}

# --- Conversation text ---------------------------------------------------------------------------

NAMES = [
    "Anna", "Ben", "Chloe", "David", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas",
    "Keiko", "Liam", "Maya", "Noah", "Olga", "Pablo", "Quinn", "Rosa", "Sami", "Tara",
]  # fmt: skip
SURNAMES = ["Berg", "Costa", "Dubois", "Eriksen", "Fischer", "Garcia", "Hansen", "Ito", "Kowalski"]
RELATIONS = [
    "sister", "brother", "manager", "neighbour", "colleague", "friend", "cousin", "dentist",
]  # fmt: skip
TIMES_PAST = [
    "Yesterday", "Last week", "This morning", "On Saturday", "Two days ago", "Last night",
    "Earlier today", "On Monday",
]  # fmt: skip
TIMES_FUTURE = [
    "tomorrow", "next week", "on Friday", "this weekend", "before the end of the month",
    "next Tuesday", "in two weeks", "after the holidays",
]  # fmt: skip
PAST_VERBS = [
    "repaired", "painted", "cleaned", "sold", "borrowed", "ordered", "cooked", "planted",
    "booked", "returned", "photographed", "reviewed",
]  # fmt: skip
INFINITIVES = [
    "repair", "paint", "clean", "sell", "order", "cook", "plant", "book", "return", "review",
    "organize", "finish",
]  # fmt: skip
ADJECTIVES = [
    "old", "new", "blue", "heavy", "small", "wooden", "broken", "shared", "favourite", "noisy",
    "second-hand", "quarterly",
]  # fmt: skip
OBJECTS = [
    "bicycle", "kitchen table", "garden fence", "report", "tent", "piano", "lasagna", "roses",
    "train tickets", "laptop", "budget spreadsheet", "bookshelf", "car", "birthday cake",
    "presentation", "balcony",
]  # fmt: skip
PLACES = [
    "at home", "at the office", "near the station", "at my parents' house", "in the park",
    "at the community garden", "downtown", "at the library",
]  # fmt: skip
TOPICS = [
    "the move to Lisbon", "the marathon training plan", "the school fundraiser", "our new puppy",
    "the tax return", "the wedding playlist", "the kitchen renovation", "the Spanish course",
    "the team offsite", "my sleep schedule",
]  # fmt: skip
FEELINGS = ["happy", "worried", "excited", "tired", "relieved", "curious", "nervous", "proud"]
DOMAINS = ["example.com", "example.org", "docs.example.net", "notes.example.io"]
ACKNOWLEDGEMENTS = [
    "Got it.", "Thanks for telling me.", "Noted.", "That sounds like a good plan.",
    "I will remember that.", "Understood.", "That is good to know.",
]  # fmt: skip

URL_FRACTION = 0.04
EMAIL_FRACTION = 0.02


def _words(text: str) -> int:
    return len(text.split())


def _thing(rng: random.Random) -> str:
    return f"the {rng.choice(ADJECTIVES)} {rng.choice(OBJECTS)}"


def _user_clause(rng: random.Random) -> str:
    name = rng.choice(NAMES)
    forms = [
        lambda: (
            f"{rng.choice(TIMES_PAST)} I {rng.choice(PAST_VERBS)} {_thing(rng)} "
            f"{rng.choice(PLACES)}."
        ),
        lambda: (
            f"My {rng.choice(RELATIONS)} {name} wants to {rng.choice(INFINITIVES)} "
            f"{_thing(rng)} {rng.choice(TIMES_FUTURE)}."
        ),
        lambda: f"I am {rng.choice(FEELINGS)} about {rng.choice(TOPICS)}.",
        lambda: (
            f"Please remind me to {rng.choice(INFINITIVES)} {_thing(rng)} "
            f"{rng.choice(TIMES_FUTURE)}."
        ),
        lambda: f"{name} and I talked about {rng.choice(TOPICS)} {rng.choice(PLACES)}.",
        lambda: f"I still have to {rng.choice(INFINITIVES)} {_thing(rng)} for {name}.",
    ]
    return rng.choice(forms)()


def _assistant_clause(rng: random.Random) -> str:
    forms = [
        lambda: (
            f"I will remind you {rng.choice(TIMES_FUTURE)} to {rng.choice(INFINITIVES)} "
            f"{_thing(rng)}."
        ),
        lambda: f"It may help to {rng.choice(INFINITIVES)} {_thing(rng)} first.",
        lambda: f"You mentioned {rng.choice(TOPICS)} before, so I linked the two.",
        lambda: f"Should I ask {rng.choice(NAMES)} about {rng.choice(TOPICS)} as well?",
        lambda: f"I saved this next to your notes on {rng.choice(TOPICS)}.",
    ]
    return rng.choice(forms)()


def _extra(rng: random.Random) -> str:
    """A link or an email address for a small fraction of turns, or nothing."""
    draw = rng.random()
    if draw < URL_FRACTION:
        path = rng.choice(["notes", "plans", "docs", "shared"])
        return f" The details are at https://{rng.choice(DOMAINS)}/{path}/{rng.randrange(1000)}"
    if draw < URL_FRACTION + EMAIL_FRACTION:
        name, surname = rng.choice(NAMES), rng.choice(SURNAMES)
        address = f"{name.lower()}.{surname.lower()}@{rng.choice(DOMAINS)}"
        return f" You can write to {name} at {address} about it."
    return ""


def _turn(rng: random.Random, clause: Callable[[random.Random], str], opener: str = "") -> str:
    """10-30 words: clauses are added until there are at least 10 and at most 30."""
    text = opener
    target = rng.randint(10, 30)
    while _words(text) < target:
        candidate = f"{text} {clause(rng)}".strip()
        if _words(candidate) > 30 and _words(text) >= 10:
            break
        text = candidate
    return text + _extra(rng)


def _text_part(text: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": text}]


# --- The plan of the run -------------------------------------------------------------------------


@dataclass
class Plan:
    """Every add's body, by thread and request number, and how many adds each user receives."""

    bodies: list[list[bytes]]
    expected: dict[str, int] = field(default_factory=dict)

    @property
    def adds(self) -> int:
        return sum(self.expected.values())


def _plan(
    *,
    rng: random.Random,
    seen_texts: set[str],
    user_ids: list[str],
    threads: int,
    adds_per_thread: int,
    sessions: int,
) -> Plan:
    """A user belongs to one thread (``index % threads``) so that its adds arrive in order: two
    adds of one user racing each other could interleave their turns and merge two exchanges.
    A user's adds fill its sessions one after the other, as conversations would."""
    users_of_thread = [user_ids[index::threads] for index in range(threads)]
    totals: dict[str, int] = dict.fromkeys(user_ids, 0)
    for index in range(threads):
        for number in range(adds_per_thread):
            totals[users_of_thread[index][number % len(users_of_thread[index])]] += 1
    plan = Plan(bodies=[[] for _ in range(threads)])
    for index in range(threads):
        for number in range(adds_per_thread):
            user_id = users_of_thread[index][number % len(users_of_thread[index])]
            sent = plan.expected.get(user_id, 0)
            session = sent * sessions // totals[user_id]
            plan.expected[user_id] = sent + 1
            user_text = _turn(rng, _user_clause)
            while user_text in seen_texts:
                user_text = _turn(rng, _user_clause)
            seen_texts.add(user_text)
            body = {
                "user_id": user_id,
                "session_id": f"{user_id}-s{session}",
                "messages": [
                    {"role": "user", "content": _text_part(user_text)},
                    {
                        "role": "assistant",
                        "content": _text_part(
                            _turn(rng, _assistant_clause, rng.choice(ACKNOWLEDGEMENTS))
                        ),
                    },
                ],
            }
            plan.bodies[index].append(json.dumps(body).encode())
    return plan


# --- Talking to the server -----------------------------------------------------------------------


@dataclass
class Progress:
    """Per user: episodic memories seen (capped at the adds it received), and the moment
    (``perf_counter``) a poll first saw all of them."""

    expected: dict[str, int]
    processed: dict[str, int] = field(default_factory=dict)
    done_at: dict[str, float] = field(default_factory=dict)

    @property
    def pending_users(self) -> list[str]:
        return [user_id for user_id in self.expected if user_id not in self.done_at]

    @property
    def processed_adds(self) -> int:
        return sum(self.processed.values())

    def sweep(self, client: KeepAliveClient) -> None:
        for user_id in self.pending_users:
            count = min(episodic_count(client, user_id), self.expected[user_id])
            self.processed[user_id] = count
            if count == self.expected[user_id]:
                self.done_at[user_id] = time.perf_counter()


def _wait_until_processed(
    *,
    client: KeepAliveClient,
    progress: Progress,
    poll_interval: float,
    stall_seconds: float,
    started: float,
    report_progress: bool,
) -> None:
    """Sweep every ``poll_interval`` seconds until every user is done; raises BenchError when
    nothing moved for ``stall_seconds`` (worker down, jobs failing)."""
    last_change, last_seen = time.perf_counter(), progress.processed_adds
    next_report = time.perf_counter() + PROGRESS_EVERY_SECONDS
    total = sum(progress.expected.values())
    while progress.pending_users:
        sweep_began = time.perf_counter()
        progress.sweep(client)
        now = time.perf_counter()
        if progress.processed_adds != last_seen:
            last_change, last_seen = now, progress.processed_adds
        elif now - last_change > stall_seconds:
            raise BenchError(
                f"no add processed for {stall_seconds:.0f} s ({last_seen} of {total} done): "
                "is the Celery worker running? Look at the extraction jobs in the admin."
            )
        if report_progress and now >= next_report:
            print(
                f"  {now - started:7.1f} s  {2 * last_seen:>7} of {2 * total} messages processed",
                flush=True,
            )
            next_report = now + PROGRESS_EVERY_SECONDS
        if progress.pending_users:
            time.sleep(max(0.0, poll_interval - (time.perf_counter() - sweep_began)))


def _probe(client: KeepAliveClient, user_id: str) -> None:
    """One add before anything else: a wrong key, a low rate limit or extraction switched off
    should stop the run with a clear message, not show up as a strange figure."""
    body = {
        "user_id": user_id,
        "session_id": f"{user_id}-probe",
        "messages": [
            {"role": "user", "content": _text_part("Just checking that you are listening.")},
            {"role": "assistant", "content": _text_part("I am, and I will remember it.")},
        ],
    }
    status, payload = client.request("POST", "/memory/add", json.dumps(body).encode())
    if status == 401:
        raise BenchError(f"401: the API key was refused ({payload})")
    if status == 429:
        raise BenchError(RATE_LIMIT_HINT)
    if status != 202 or not isinstance(payload, dict) or payload.get("status") != "queued":
        raise BenchError(f"POST /memory/add answered {status} {payload}, expected 202 queued")


# --- Reporting -----------------------------------------------------------------------------------


def _report_adds(result: LoadResult) -> None:
    print(result.line())
    rate, p50, p95 = result.requests_per_second, result.percentile(0.5), result.percentile(0.95)
    print(
        f"  accepted adds/s {rate:8.1f}    goal >= {GOAL_ADDS_PER_SECOND:.0f}      "
        f"{verdict(rate >= GOAL_ADDS_PER_SECOND)}"
    )
    print(f"  p50 latency     {p50:8.2f} ms")
    print(
        f"  p95 latency     {p95:8.2f} ms goal <= {GOAL_P95_MS:.0f} ms    "
        f"{verdict(p95 <= GOAL_P95_MS)}"
    )


def main(argv: Sequence[str] | None = None) -> int:  # noqa: PLR0915 (one straight script)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    server_arguments(parser)
    parser.add_argument("--adds", type=int, default=20000, help="two-turn adds in total")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--sessions", type=int, default=3, help="sessions per user")
    parser.add_argument("--warmup", type=int, default=25, help="warm-up adds per thread")
    parser.add_argument("--poll-interval", type=float, default=1.0, help="seconds")
    parser.add_argument(
        "--stall-seconds", type=float, default=300.0, help="give up when nothing moves this long"
    )
    parser.add_argument("--seed", type=int, default=1)
    arguments = arguments_parse(parser, argv, smoke=SMOKE)
    if arguments.users < arguments.threads or arguments.adds < arguments.users:
        parser.error("need --threads <= --users <= --adds")
    try:
        api_key = api_key_read(arguments)
    except BenchError as error:
        print(error, file=sys.stderr)
        return 1
    headers = {"X-API-Key": api_key, "Content-Type": "application/json"}
    threads = arguments.threads
    adds_per_thread = arguments.adds // threads

    run = "bench-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    rng = random.Random(arguments.seed)
    seen_texts: set[str] = set()
    warmup = _plan(
        rng=rng,
        seen_texts=seen_texts,
        user_ids=[f"{run}-warmup-{index}" for index in range(threads)],
        threads=threads,
        adds_per_thread=arguments.warmup,
        sessions=1,
    )
    plan = _plan(
        rng=rng,
        seen_texts=seen_texts,
        user_ids=[f"{run}-{index}" for index in range(arguments.users)],
        threads=threads,
        adds_per_thread=adds_per_thread,
        sessions=arguments.sessions,
    )
    print(
        f"{plan.adds} two-turn adds ({2 * plan.adds} messages) from {threads} threads to "
        f"{arguments.users} users x {arguments.sessions} sessions, users {run}-*, "
        f"{arguments.base_url}",
        flush=True,
    )

    client = KeepAliveClient(arguments.base_url, api_key)
    try:
        began = time.perf_counter()
        _probe(client, f"{run}-warmup-0")
        warmup.expected[f"{run}-warmup-0"] = warmup.expected.get(f"{run}-warmup-0", 0) + 1
        if arguments.warmup > 0:
            result = run_load(
                label="warm-up",
                base_url=arguments.base_url,
                headers=headers,
                threads=threads,
                requests_per_thread=arguments.warmup,
                request=lambda index, number: ("POST", "/memory/add", warmup.bodies[index][number]),
            )
            if set(result.statuses) != {202}:
                raise BenchError(f"warm-up adds answered {result.statuses}, expected only 202")
        _wait_until_processed(
            client=client,
            progress=Progress(warmup.expected),
            poll_interval=arguments.poll_interval,
            stall_seconds=arguments.stall_seconds,
            started=began,
            report_progress=False,
        )
        print(f"warm-up: {warmup.adds} adds processed in {time.perf_counter() - began:.1f} s")

        # perf_counter just before each thread's first request: the earliest is the first add.
        first_sent = [float("inf")] * threads

        def request(index: int, number: int) -> tuple[str, str, bytes]:
            if number == 0:
                first_sent[index] = time.perf_counter()
            return "POST", "/memory/add", plan.bodies[index][number]

        result = run_load(
            label="POST /memory/add",
            base_url=arguments.base_url,
            headers=headers,
            threads=threads,
            requests_per_thread=adds_per_thread,
            request=request,
        )
        last_accepted = time.perf_counter()
        first_add = min(first_sent)
        _report_adds(result)
        if set(result.statuses) != {202}:
            print(f"non-202 answers: {result.statuses}", file=sys.stderr)
            if 429 in result.statuses:
                print(RATE_LIMIT_HINT, file=sys.stderr)
            return 1

        # One sweep right away: what the worker got through while the adds were arriving.
        progress = Progress(plan.expected)
        progress.sweep(client)
        swept = time.perf_counter()
        during = 2 * progress.processed_adds
        print(
            f"processed while adds arrived: {during} of {2 * plan.adds} messages within "
            f"{swept - first_add:.1f} s of the first add -> "
            f"{during / (swept - first_add):.1f} messages/s"
        )

        _wait_until_processed(
            client=client,
            progress=progress,
            poll_interval=arguments.poll_interval,
            stall_seconds=arguments.stall_seconds,
            started=first_add,
            report_progress=True,
        )
    except BenchError as error:
        print(error, file=sys.stderr)
        return 1
    except OSError as error:
        print(f"{arguments.base_url}: {error} (is the server running?)", file=sys.stderr)
        return 1

    all_done = max(progress.done_at.values())
    total_seconds = all_done - first_add
    drain_seconds = max(0.0, all_done - last_accepted)
    backlog = 2 * plan.adds - during
    end_to_end = 2 * plan.adds / total_seconds
    print(
        f"backlog after the last add: {backlog} messages, drained {drain_seconds:.1f} s after "
        f"the last add was accepted"
        + (f" -> {backlog / (all_done - swept):.1f} messages/s" if all_done > swept else "")
    )
    print(
        f"add to searchable: {2 * plan.adds} messages in {total_seconds:.1f} s -> "
        f"{end_to_end:.1f} messages/s    goal >= {GOAL_MESSAGES_PER_SECOND:.0f}    "
        f"{verdict(end_to_end >= GOAL_MESSAGES_PER_SECOND)}"
    )
    print(f"(done times are known to within one poll sweep, every {arguments.poll_interval} s)")
    if arguments.smoke:
        print(SMOKE_NOTE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
