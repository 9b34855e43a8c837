"""Retrieval quality: does ``GET /memory/search`` find the turns (LoCoMo) and the sessions
(LongMemEval-S) that hold a question's answer? No LLM in the loop: both benchmarks name their
evidence, and every memory names the messages it came from (``source_message_ids``).

Held-out halves (``--split``, default test): LoCoMo conversations 1-5 in file order are dev and
6-10 test; LongMemEval-S ``longmemeval_s_cleaned_sample60`` is dev and ``..._more100`` test. A
rule, weight or threshold is chosen on dev and reported on test unchanged: a figure bought by
reading one half's failures must hold on the other (bench-data/README.md).

1. Ingest, through the real path: one end user per LoCoMo conversation
   (``rq-<run>-locomo-<sample_id>``) and per LongMemEval question (``rq-<run>-lme-<question_id>``;
   ``rq-<run>-<pattern>-...`` in the other patterns). A LoCoMo turn's text is ``text`` plus
   `` [image: <blip_caption>]`` when it has one. ``--client-pattern`` says how a client adds:
   - ``session`` (default): one ``POST /memory/add`` per haystack session, with its session_id
     and its date as ``occurred_at``. LoCoMo's speaker_a speaks as role ``user`` and speaker_b as
     ``assistant``, each with its ``name``; LongMemEval turns keep their own role and content.
   - ``turns``: as the published MIRIX client sends a conversation, one add per turn and no
     session_id (the server files them in the user's default conversation), every turn role
     ``user`` with its speaker in the text, ``"<speaker>: <text>"`` (LoCoMo: the speaker's name;
     LongMemEval: the turn's own role, ``"assistant: ..."``), ``occurred_at`` its haystack
     session's date, and ``filter_tags`` ``{"session": <the session pattern's session_id>}``.
   - ``turn-ids``: as ``turns``, each turn's ``filter_tags`` also naming the turn itself,
     ``{"session": ..., "message_id": <dia_id, or LongMemEval "<session id>#<index>">}``, as a
     client that keeps its own message ids as tags sends them.
   The ids ``/memory/add`` returns map every message back to its LoCoMo ``dia_id`` or its
   LongMemEval (session id, turn index). A user's adds go in order through one thread;
   ``--threads`` users at a time.
2. Wait until the Celery worker has processed everything. Session pattern: every message of every
   bench session, read back with ``GET /sessions/{id}/messages``, is no longer ``pending``.
   Turns and turn-ids patterns: the default conversation's messages cannot be read back (that
   route names a session by its session_id, and it has none), so a turn counts as processed
   once a memory cites it, as the deterministic extractor does for every turn;
   ``--skip-ingest`` then reads the turns' ids from those citations (see
   ingest._turns_provenance_read). Then count the turns that some memory cites (a turn no
   memory cites can never be found).
3. Ask every question with ``GET /memory/search?memory_type=episodic`` once per ``--methods``
   lane (bm25, embedding, hybrid), all against the same ingest; a LongMemEval question also
   sends ``temporal=true`` and its ``question_date`` as ``as_of``, so that a time phrase in it
   ("a week ago") favours the episodes of that time, read from the day it is asked (a LoCoMo
   question sends neither, as the MIRIX client does: the dates it names, "on 1 February,
   2023", are read by the server's default); ``limit`` 20 for LoCoMo and 100 for LongMemEval,
   so that every list reaches 20 units (see datasets.SEARCH_LIMITS). Episodic memories hold
   every turn; ``--memory-type all`` adds the resource and knowledge-vault items, which cite
   single turns and, on LongMemEval, pushed episodic hits down (hybrid nDCG@10 0.95 -> 0.88 on
   12 questions) while their per-type limit made the lists longer.
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
   of letters and digits, NLTK's English stop words dropped (bench.common.STOP_WORDS). A
   LoCoMo document is one turn, ``"<speaker>: <text>"`` with its image caption, unit its dia_id; a
   LongMemEval document is one haystack session, its user turns concatenated (the official
   retrieval rule). Every unit is ranked, ties in haystack order. It reproduces
   bench-data/README.md's figures (LongMemEval-S recall_any@5 0.918 dev, 0.989 test); a server
   that indexes the same turns should not rank them worse than this.

Goals: LoCoMo turn-level recall_any@10 >= 0.80; LongMemEval-S session recall_any@5 >= 0.97;
and hybrid never below the reference on those metrics (each lane's verdict is printed, and
the categories where hybrid is below it). Search latency p50/p95 is measured by the client
under ``--threads`` concurrent searches, after a few warm-up searches per lane.

Data: ``../shared/bench-data`` (see its README). Run against a live server started with the rate
limit raised (one key sends everything):

    API_RATE_LIMIT=10000000/min make run
    .venv/bin/python -m bench.retrieval_quality [--base-url URL] [--api-key KEY]
        [--dataset locomo|longmemeval|both] [--split dev|test]
        [--client-pattern session|turns|turn-ids]
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
import json
import re
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from bench.common import (
    RATE_LIMIT_HINT,
    SMOKE_NOTE,
    BenchError,
    KeepAliveClient,
    api_key_read,
    arguments_parse,
    server_arguments,
)
from bench.retrieval_quality.datasets import (
    CLIENT_PATTERNS,
    DEFAULT_DATA_DIR,
    LOCOMO_FILE,
    LONGMEMEVAL_FILES,
    SPLITS,
    Dataset,
    _questions_to_ask,
    _user_prefix,
    dataset_trim,
    locomo_load,
    longmemeval_load,
)
from bench.retrieval_quality.ingest import (
    Clients,
    IngestReport,
    Provenance,
    _adds_of,
    _coverage,
    _ingest,
    _provenance_read,
    _search_available,
    _turns_provenance_read,
    _wait_until_extracted,
)
from bench.retrieval_quality.report import (
    DatasetRun,
    _figures,
    _json_safe,
    _report_dataset,
    _report_ingest,
)
from bench.retrieval_quality.scoring import (
    _SEARCH_MISSING,
    METHODS,
    SearchMissingError,
    _run_method,
    reference_run,
    unfilled_run,
)

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9_.@:+-]{1,100}$")
SMOKE = {"limit_questions": 2, "threads": 2, "poll_interval": 0.5, "stall_seconds": 60.0}
SMOKE_SESSIONS = 3


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
    if skip_ingest and pattern != "session":
        # The turns' ids are read from the memories that cite them: only once all are made.
        provenance = _turns_provenance_read(clients=clients, pool=pool, haystacks=dataset.haystacks)
    if not skip_ingest:
        report.searchable_seconds = time.perf_counter() - began
    _coverage(clients=clients, pool=pool, provenance=provenance, report=report)
    return provenance, report


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    # The name the bench had as one file: argparse would name this module, ``__main__.py``.
    parser = argparse.ArgumentParser(
        prog="retrieval_quality.py", description=__doc__.splitlines()[0]
    )
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
        "turn, no session_id, role user, '<speaker>: <text>' (as the MIRIX client sends); "
        "turn-ids: as turns, each turn's filter_tags also carrying its own id as message_id",
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
                runs += [unfilled for run in runs if (unfilled := unfilled_run(run))]
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
