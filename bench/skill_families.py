"""The avoid side of skill learning: task families where a tempting fix fails and another works,
learned from task sessions through the real API and worker, then asked in wording never learned.

A family (``FAMILIES``, written for this bench; 8 ``dev`` ones, whose failures were read to mend
the distiller, and 6 ``test`` ones written after, to check those rules) is a kind of task that
fails one way (the first tool's error), a fix that works, and two tempting fixes that do not
(each named to look right for the symptom: "increase_timeout" for a timeout, "retry_request"
for a refused call; some are tempting in more than one family). Requests are generated from
templates and slot values: the first ``LEARNED_TEMPLATES`` phrasings are learned from, the
others (other wording: the symptom told in the user's words, no template shared) only asked.

Sessions, one per learned request (``--sessions-per-family``, 6): the request; the first tool's
call and its error; one tempting fix (seeded) called twice, failing twice (a failing action
repeated: an ``avoid`` lesson); the fix and its success; the answer; the user's thanks. Each
add declares its tools (OpenAI's shape, with a description of each). A fresh end user per run.

Scored, for every held-out request:
- ``POST /skills/retrieve`` (limit 5): p@1 (the first skill's tools hold the family's fix),
  ``wrong@1`` (the first skill's tools hold a tempting fix: should be none), and whether the
  first skill's pitfalls name the tempting fix its sessions tried (the avoid side kept);
- ``GET /experiences/recommend``: accuracy (the action is a call of the fix), ``recommended a
  failed fix`` (an action of a tempting fix: never, they only failed), not found;
- beside them, in this process, what a memory of attempts without outcomes would advise: the
  nearest learned session by BM25 (the retrieval bench's rule) over the requests, and the remedy
  it tried most after the first error (the tempting fix was tried twice, the fix once).

Usage, against a server with LLM_PROVIDER=none and the rate limit raised:
    .venv/bin/python -m bench.skill_families [--base-url URL] [--api-key KEY] [--seed 0]
        [--sessions-per-family 6] [--keep] [--json-out FILE] [--smoke]
Figures are printed over all families and per half. ``--smoke``: 3 families, 3 sessions each.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode

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
    RETRIEVE_LIMIT,
    Bm25,
    SessionPlan,
    answer_check,
    runs_waiter,
    sessions_send,
    tool_definition,
    tool_turns,
)

SMOKE = {"families": 3, "sessions_per_family": 3}
LEARNED_TEMPLATES = 4  # the first templates of a family are learned from, the rest only asked


@dataclass(frozen=True)
class Family:
    name: str
    first_tool: str
    error: str
    fix: str
    fix_result: str
    tempting: tuple[tuple[str, str], tuple[str, str]]  # (tool, its error)
    templates: tuple[str, ...]  # LEARNED_TEMPLATES learned, then the held-out ones
    slots: tuple[str, ...]
    half: str = "dev"


FAMILIES = (
    Family(
        "csv-encoding",
        "read_csv",
        "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9 in position 1207",
        "read_csv_latin1",
        "Loaded 1,204 rows, 9 columns.",
        (
            ("read_csv_skip_bad_lines", "ParserError: every line still fails to decode (0xe9)"),
            ("strip_non_ascii", "Error: wrote 0 rows; each line held a non-ASCII byte"),
        ),
        (
            "Load {} into a dataframe.",
            "Read the export {} and count its rows.",
            "Open {} and list the columns.",
            "Import {} for the monthly report.",
            "The file {} won't open because of weird accented characters; get it into a table.",
            "I need the rows of {}, it was saved by an old Windows program.",
        ),
        ("sales.csv", "clients.csv", "stock.csv", "refunds.csv", "payroll.csv", "leads.csv"),
    ),
    Family(
        "expired-token",
        "call_api",
        "401 Unauthorized: the access token expired",
        "refresh_oauth_token",
        "New token issued; the call returned 200 OK.",
        (
            ("retry_request", "401 Unauthorized: the access token expired"),
            ("increase_timeout", "401 Unauthorized: the access token expired"),
        ),
        (
            "Fetch the latest invoices from the {} API.",
            "Pull yesterday's orders from {}.",
            "Sync the contact list with {}.",
            "Get the open tickets from {}.",
            "The {} integration says I am not authorized anymore, though it worked last week.",
            "Calls to {} are rejected since this morning; fix the connection and get the data.",
        ),
        ("Stripe", "Zendesk", "HubSpot", "Shopify", "Salesforce", "Jira"),
    ),
    Family(
        "large-upload",
        "upload_file",
        "504 Gateway Timeout after 30 s",
        "multipart_upload",
        "Uploaded in 48 parts; checksum verified.",
        (
            ("increase_timeout", "504 Gateway Timeout after 120 s"),
            ("retry_request", "504 Gateway Timeout after 30 s"),
        ),
        (
            "Upload the video {} to the media bucket.",
            "Put the backup archive {} on the storage server.",
            "Send {} to the shared drive.",
            "Copy the dump {} to cloud storage.",
            "Moving the large recording {} to storage times out every single time.",
            "Help me get the big file {} into the bucket, it never finishes.",
        ),
        ("keynote.mp4", "backup.tar", "db.dump", "raw.mov", "scans.zip", "logs.tar.gz"),
    ),
    Family(
        "rate-limit",
        "call_api",
        "429 Too Many Requests: retry after 60 s",
        "batch_requests",
        "All records sent in 12 batches; 0 refused.",
        (
            ("retry_request", "429 Too Many Requests: retry after 60 s"),
            ("parallel_requests", "429 Too Many Requests: retry after 300 s"),
        ),
        (
            "Look up the shipping status of all {} orders.",
            "Geocode the {} customer addresses.",
            "Enrich the {} leads with company data.",
            "Translate the {} product titles.",
            "The service keeps throttling me while I process {} records; get them all done.",
            "Halfway through the {} lookups it stops answering; finish the job.",
        ),
        ("2,000", "5,400", "800", "12,000", "3,300", "950"),
    ),
    Family(
        "push-rejected",
        "git_push",
        "! [rejected] main -> main (non-fast-forward)",
        "git_pull_rebase",
        "Rebased 3 commits onto origin; pushed.",
        (
            ("git_push_force", "remote: error: GH006: Protected branch update failed"),
            ("git_reset_hard", "error: you would lose 3 local commits; aborted"),
        ),
        (
            "Push my changes on {} to the remote.",
            "Publish the commits of {}.",
            "Send the {} branch to origin.",
            "Get my local work on {} onto the server.",
            "The remote won't take my {} commits, it says something about fast-forward.",
            "My teammate shared theirs first and now I can't share my {} work.",
        ),
        ("main", "release-2.4", "feature/login", "hotfix-17", "docs", "develop"),
    ),
    Family(
        "port-in-use",
        "docker_run",
        "Bind for 0.0.0.0:8080 failed: port is already allocated",
        "docker_run_other_port",
        "Container started, listening on 0.0.0.0:8081.",
        (
            ("docker_restart_daemon", "Bind for 0.0.0.0:8080 failed: port is already allocated"),
            ("docker_prune_images", "Bind for 0.0.0.0:8080 failed: port is already allocated"),
        ),
        (
            "Start the {} container.",
            "Run the {} image locally.",
            "Bring up {} for testing.",
            "Launch a {} container on my laptop.",
            "{} refuses to come up; something else already holds its address.",
            "I can't boot the {} service in docker because 8080 is taken.",
        ),
        ("postgres", "grafana", "nginx", "redis", "keycloak", "minio"),
    ),
    Family(
        "locked-migration",
        "run_migration",
        "lock timeout: relation is locked by another transaction",
        "run_migration_concurrently",
        "Index built concurrently; no lock held on writes.",
        (
            ("kill_all_connections", "permission denied to terminate other sessions"),
            ("increase_lock_timeout", "lock timeout after 600 s: relation is still locked"),
        ),
        (
            "Add an index on {}.email.",
            "Apply the schema change to {}.",
            "Migrate the {} table to the new column type.",
            "Create the index on {}.created_at.",
            "Changing {} keeps waiting behind the live app's queries.",
            "The {} migration hangs because production traffic is using the table.",
        ),
        ("users", "orders", "events", "payments", "sessions", "invoices"),
    ),
    Family(
        "scanned-pdf",
        "extract_pdf_text",
        "Error: no text layer found (0 characters extracted)",
        "ocr_pdf",
        "Recognised 14 pages, 22,318 characters.",
        (
            ("extract_pdf_text_raw", "Error: no text layer found (0 characters extracted)"),
            ("convert_pdf_to_docx", "Error: the converted document is empty"),
        ),
        (
            "Extract the text of {}.",
            "Get the contents of the contract {}.",
            "Pull the words out of {} for search.",
            "Read {} and summarise it.",
            "{} is just photographed pages; I need what it says anyway.",
            "Copying from {} gives nothing, it's an image of paper; get me the words.",
        ),
        ("lease.pdf", "invoice-118.pdf", "minutes.pdf", "deed.pdf", "thesis.pdf", "manual.pdf"),
    ),
    # The test half: written after the rules above were found on the dev families, to check
    # that they hold on families nobody read the failures of.
    Family(
        "peer-dependencies",
        "npm_install",
        "npm ERR! ERESOLVE unable to resolve dependency tree",
        "npm_install_legacy_peer_deps",
        "added 1,284 packages in 41s",
        (
            ("npm_cache_clean", "npm ERR! ERESOLVE unable to resolve dependency tree"),
            ("delete_node_modules", "npm ERR! ERESOLVE unable to resolve dependency tree"),
        ),
        (
            "Install the dependencies of {}.",
            "Set up {} on a fresh checkout.",
            "Add the charting package to {}.",
            "Get {} building on the CI image.",
            "{} won't install, npm complains that two packages want different React versions.",
            "Something about conflicting peers stops me from setting up {}; sort it out.",
        ),
        ("the dashboard", "web-shop", "admin-ui", "docs-site", "the mobile app", "widgets"),
        half="test",
    ),
    Family(
        "corporate-ca",
        "http_get",
        "SSLError: certificate verify failed: unable to get local issuer certificate",
        "use_corporate_ca_bundle",
        "200 OK (verified against the company CA bundle)",
        (
            ("disable_ssl_verify", "Blocked by policy: TLS verification may not be disabled"),
            ("retry_request", "SSLError: certificate verify failed"),
        ),
        (
            "Download the report from {}.",
            "Query the status page of {}.",
            "Fetch the JSON feed at {}.",
            "Check that {} answers.",
            "Python refuses to talk to {} and says it can't check who issued its certificate.",
            "Our internal site {} gives a trust error from scripts but opens in the browser.",
        ),
        (
            "wiki.corp.local",
            "jira.intra",
            "git.corp.local",
            "grafana.intra",
            "hr.corp.local",
            "ci.intra",
        ),
        half="test",
    ),
    Family(
        "out-of-memory",
        "load_table",
        "MemoryError: unable to allocate 12.4 GiB for an array",
        "load_table_in_chunks",
        "Processed 48 chunks of 1,000,000 rows.",
        (
            ("increase_swap", "swapon: permission denied"),
            ("restart_kernel", "MemoryError: unable to allocate 12.4 GiB for an array"),
        ),
        (
            "Compute the monthly totals from {}.",
            "Deduplicate the rows of {}.",
            "Join {} with the customer table.",
            "Aggregate {} by region.",
            "My laptop runs out of RAM whenever I touch {}; I still need the numbers.",
            "{} is far bigger than my machine's memory, work through it anyway.",
        ),
        ("clicks_2025", "transactions", "sensor_log", "page_views", "call_records", "telemetry"),
        half="test",
    ),
    Family(
        "attachment-too-large",
        "send_email",
        "552 5.3.4 Message size exceeds fixed limit",
        "share_attachment_link",
        "Sent with a download link (expires in 7 days).",
        (
            ("compress_attachment", "552 5.3.4 Message size exceeds fixed limit"),
            ("retry_send", "552 5.3.4 Message size exceeds fixed limit"),
        ),
        (
            "Email {} to the auditors.",
            "Send {} to the client.",
            "Mail {} to the whole team.",
            "Forward {} to legal.",
            "The mail server bounces my message with {} because it is too heavy.",
            "I can't get {} to the recipients, the mail comes back saying it's over the size.",
        ),
        (
            "the 80 MB deck",
            "the raw footage",
            "the scan bundle",
            "the export archive",
            "the design files",
            "the audio masters",
        ),
        half="test",
    ),
    Family(
        "missing-env-var",
        "kubectl_rollout",
        "Back-off restarting failed container: KeyError: 'DATABASE_URL'",
        "set_deployment_env",
        "Rollout complete: 3 of 3 pods ready.",
        (
            (
                "kubectl_delete_pod",
                "Back-off restarting failed container: KeyError: 'DATABASE_URL'",
            ),
            ("increase_memory_limit", "Back-off restarting failed container: KeyError"),
        ),
        (
            "Deploy the new version of {}.",
            "Roll out {} to staging.",
            "Ship the {} release to the cluster.",
            "Update {} on production.",
            "The {} pods keep crashing right after start and restart forever.",
            "{} dies on boot in the cluster, complaining about a setting it can't find.",
        ),
        ("billing", "search-api", "notifier", "auth", "checkout", "reports"),
        half="test",
    ),
    Family(
        "excel-dates",
        "read_excel",
        "ValueError: could not convert '45123' to a date",
        "read_excel_with_date_serials",
        "Read 3,120 rows; dates parsed from Excel serials.",
        (
            ("cast_to_string", "ValueError: the date column is required as dates"),
            ("read_csv", "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xd0"),
        ),
        (
            "Load the workbook {} into a table.",
            "Read the sheet {} and sort it by date.",
            "Import {} for the quarterly report.",
            "Chart the dates in {}.",
            "In {} every date shows up as a five-digit number; I need real dates.",
            "The dates of {} come out as numbers like 45123, turn them into days.",
        ),
        ("budget.xlsx", "shifts.xlsx", "orders.xlsx", "leave.xlsx", "assets.xlsx", "grants.xlsx"),
        half="test",
    ),
)

DESCRIPTIONS = {
    "read_csv": "Read a CSV file into a table (UTF-8).",
    "read_csv_latin1": "Read a CSV file written in the latin-1 (Windows) encoding into a table.",
    "read_csv_skip_bad_lines": "Read a CSV file, skipping lines that do not parse.",
    "strip_non_ascii": "Rewrite a text file keeping only its ASCII characters.",
    "call_api": "Call a third-party HTTP API with the stored credentials.",
    "refresh_oauth_token": "Get a new OAuth access token with the refresh token, then call again.",
    "retry_request": "Send the same HTTP request again.",
    "increase_timeout": "Send an HTTP request again with a longer timeout.",
    "upload_file": "Upload a file to object storage in one request.",
    "multipart_upload": "Upload a large file to object storage in parts, resumably.",
    "batch_requests": "Send many API calls as batches, paced to the service's rate limit.",
    "parallel_requests": "Send many API calls at once, in parallel.",
    "git_push": "Push the local branch to its remote.",
    "git_pull_rebase": "Fetch the remote branch and replay local commits on top of it.",
    "git_push_force": "Overwrite the remote branch with the local one.",
    "git_reset_hard": "Reset the local branch to the remote, dropping local changes.",
    "docker_run": "Start a container from an image, publishing its port 8080.",
    "docker_run_other_port": "Start a container publishing its service on a free host port.",
    "docker_restart_daemon": "Restart the Docker daemon.",
    "docker_prune_images": "Remove unused Docker images.",
    "run_migration": "Apply a database schema migration.",
    "run_migration_concurrently": "Apply a migration without locking writes (CONCURRENTLY).",
    "kill_all_connections": "Terminate every other session connected to the database.",
    "increase_lock_timeout": "Apply a migration again, waiting longer for its locks.",
    "extract_pdf_text": "Extract the text layer of a PDF.",
    "ocr_pdf": "Recognise the text of scanned PDF pages (OCR).",
    "extract_pdf_text_raw": "Extract a PDF's text layer without layout analysis.",
    "convert_pdf_to_docx": "Convert a PDF into a Word document.",
    "npm_install": "Install a JavaScript project's dependencies with npm.",
    "npm_install_legacy_peer_deps": "Install dependencies, accepting peer version conflicts.",
    "npm_cache_clean": "Empty npm's package cache.",
    "delete_node_modules": "Delete the project's installed packages.",
    "http_get": "Fetch a URL over HTTPS.",
    "use_corporate_ca_bundle": "Fetch a URL trusting the company's certificate authority.",
    "disable_ssl_verify": "Fetch a URL without checking its TLS certificate.",
    "load_table": "Load a whole table into memory.",
    "load_table_in_chunks": "Process a table in chunks that fit in memory.",
    "increase_swap": "Add swap space to the machine.",
    "restart_kernel": "Restart the notebook's kernel.",
    "send_email": "Send an e-mail with attachments.",
    "share_attachment_link": "Upload the attachment and send a download link instead.",
    "compress_attachment": "Zip the attachment before sending.",
    "retry_send": "Send the same e-mail again.",
    "kubectl_rollout": "Roll out a new version of a Kubernetes deployment.",
    "set_deployment_env": "Set a deployment's environment variables and roll it out again.",
    "kubectl_delete_pod": "Delete a pod so that it is recreated.",
    "increase_memory_limit": "Raise a deployment's memory limit.",
    "read_excel": "Read an Excel sheet into a table.",
    "read_excel_with_date_serials": "Read an Excel sheet, converting date serial numbers.",
    "cast_to_string": "Read every column of a sheet as text.",
}


def _seeded(seed: int, text: str) -> random.Random:
    return random.Random(hashlib.sha256(f"{seed}:{text}".encode()).hexdigest())


@dataclass(frozen=True)
class Held:
    family: Family
    request: str


@dataclass
class Planned:
    plans: list[SessionPlan]
    held: list[Held]
    tried: dict[str, set[str]]  # family → the tempting fixes its sessions tried


def families_plan(
    families: Sequence[Family], *, sessions_per_family: int, seed: int, user_id: str
) -> Planned:
    """The learned sessions (templates cycled, each with its own slot) and the held-out
    requests (every held-out template with every slot)."""
    plans: list[SessionPlan] = []
    held: list[Held] = []
    tried: dict[str, set[str]] = {}
    for family in families:
        rng = _seeded(seed, family.name)
        learned = family.templates[:LEARNED_TEMPLATES]
        for number in range(sessions_per_family):
            slot = family.slots[number % len(family.slots)]
            request = learned[number % len(learned)].format(slot)
            tempting, its_error = rng.choice(family.tempting)
            tried.setdefault(family.name, set()).add(tempting)
            arguments = {"target": slot}
            messages = [
                {"role": "user", "content": request},
                *tool_turns(family.first_tool, arguments, family.error, "call-1"),
                *tool_turns(tempting, arguments, its_error, "call-2"),
                *tool_turns(tempting, arguments, its_error, "call-3"),
                *tool_turns(family.fix, arguments, family.fix_result, "call-4"),
                {"role": "assistant", "content": f"Done with {family.fix}."},
                {"role": "user", "content": "Thanks, that is what I needed."},
            ]
            tools = [family.first_tool, tempting, family.fix]
            plans.append(
                SessionPlan(
                    f"{user_id}-{family.name}-{number:03d}",
                    family.fix,
                    request,
                    tempting,
                    messages,
                    [tool_definition(tool, DESCRIPTIONS[tool]) for tool in tools],
                )
            )
        held += [
            Held(family, template.format(slot))
            for template in family.templates[LEARNED_TEMPLATES:]
            for slot in family.slots
        ]
    _seeded(seed, "order").shuffle(plans)
    return Planned(plans, held, tried)


@dataclass
class Scores:
    asked: int = 0
    skill_hits: int = 0
    skill_wrong: int = 0
    pitfalls_named: int = 0
    recommend_hits: int = 0
    recommend_failed_fix: int = 0
    recommend_not_found: int = 0
    nearest_fix: int = 0
    nearest_tempting: int = 0

    def add(self, other: Scores) -> None:
        for name in vars(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def lines(self) -> list[str]:
        n = max(self.asked, 1)
        return [
            f"held-out requests asked: {self.asked}",
            f"POST /skills/retrieve  p@1 {self.skill_hits / n:.3f}  wrong@1 "
            f"{self.skill_wrong / n:.3f}  first skill's pitfalls name the tempting fix "
            f"{self.pitfalls_named / n:.3f}",
            f"GET /experiences/recommend  accuracy {self.recommend_hits / n:.3f}  recommended a "
            f"failed fix {self.recommend_failed_fix}  not found {self.recommend_not_found}",
            f"baseline most-tried remedy of the nearest session (BM25 over the learned "
            f"requests, results ignored): the fix {self.nearest_fix / n:.3f}, a tempting fix "
            f"{self.nearest_tempting / n:.3f}",
        ]


def _tool_of(action: str) -> str:
    return action.split("(", 1)[0].strip()


def _asked(
    client: KeepAliveClient,
    user_id: str,
    planned: Planned,
    held: Held,
    *,
    nearest: Bm25,
    by_session: dict[str, SessionPlan],
) -> Scores:
    """One held-out request's scores."""
    family = held.family
    tempting = {tool for tool, _ in family.tempting}
    scores = Scores(asked=1)
    body = {"user_id": user_id, "task": held.request, "limit": RETRIEVE_LIMIT}
    found = answer_check(
        *client.request("POST", "/skills/retrieve", json.dumps(body).encode()),
        200,
        "POST /skills/retrieve",
    )["skills"]
    if found:
        first = found[0]
        scores.skill_hits = int(family.fix in first["tools"])
        scores.skill_wrong = int(bool(tempting & set(first["tools"])))
        pitfalls = " ".join(first.get("pitfalls") or [])
        scores.pitfalls_named = int(
            all(tool in pitfalls for tool in planned.tried.get(family.name, ()))
        )
    query = urlencode({"user_id": user_id, "task": held.request})
    advice = answer_check(
        *client.request("GET", f"/experiences/recommend?{query}"),
        200,
        "GET /experiences/recommend",
    )
    if not advice["found"]:
        scores.recommend_not_found = 1
    else:
        tool = _tool_of(advice["action"])
        scores.recommend_hits = int(tool == family.fix)
        scores.recommend_failed_fix = int(tool in tempting)
    remedies = Counter(
        call["function"]["name"]
        for turn in by_session[nearest.ranked(held.request)[0]].messages[3:]
        for call in turn.get("tool_calls") or []
    )
    most_tried = remedies.most_common(1)[0][0]
    scores.nearest_fix = int(most_tried == family.fix)
    scores.nearest_tempting = int(most_tried in tempting)
    return scores


def score(client: KeepAliveClient, user_id: str, planned: Planned) -> dict[str, Scores]:
    """The scores of every held-out request, over all families and per half."""
    by_session = {plan.session_id: plan for plan in planned.plans}
    nearest = Bm25({plan.session_id: plan.request for plan in planned.plans})
    halves = {"all": Scores()}
    for held in planned.held:
        one = _asked(client, user_id, planned, held, nearest=nearest, by_session=by_session)
        for half in ("all", held.family.half):
            halves.setdefault(half, Scores()).add(one)
    return halves


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    server_arguments(parser)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--families", type=int, default=len(FAMILIES))
    parser.add_argument("--sessions-per-family", type=int, default=6)
    parser.add_argument("--poll-interval", type=float, default=1.0, help="seconds")
    parser.add_argument("--stall-seconds", type=float, default=300.0)
    parser.add_argument("--keep", action="store_true", help="keep the bench's user")
    parser.add_argument("--json-out", type=Path, default=None)
    arguments = arguments_parse(parser, argv, smoke=SMOKE)
    if not 1 <= arguments.families <= len(FAMILIES) or arguments.sessions_per_family < 1:
        parser.error(f"--families is 1-{len(FAMILIES)}; --sessions-per-family at least 1")
    return arguments


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    arguments = _arguments(argv)
    start = run_start("bench.skill_families", argv)
    started_at, command = start.at, start.command
    user_id = f"skillfamilies-{started_at:%Y%m%d-%H%M%S-%f}"
    families = FAMILIES[: arguments.families]
    planned = families_plan(
        families,
        sessions_per_family=arguments.sessions_per_family,
        seed=arguments.seed,
        user_id=user_id,
    )
    print(
        f"{len(families)} families, {len(planned.plans)} sessions, {len(planned.held)} held-out "
        f"requests; user {user_id}",
        flush=True,
    )
    try:
        client = KeepAliveClient(arguments.base_url, api_key_read(arguments), timeout=120)
        answer_check(*client.request("GET", "/users?limit=1"), 200, "GET /users (the API key)")
        session_ids = {plan.session_id for plan in planned.plans}
        began = time.monotonic()

        wait = runs_waiter(
            client,
            user_id,
            session_ids,
            began=began,
            poll_interval=arguments.poll_interval,
            stall_seconds=arguments.stall_seconds,
        )
        try:
            sent = sessions_send(client, user_id, planned.plans, max_pending=None, wait=wait)
            print(f"sent in {sent.seconds:.1f} s; POST /learning-runs: {sent.requested_run}")
            wait(lambda seen: seen.taken == len(session_ids) and not seen.active)
            print(f"learned in {time.monotonic() - began:.1f} s from the first add", flush=True)
            scores = score(client, user_id, planned)
        finally:
            if not arguments.keep:
                status, payload = client.request("DELETE", f"/users/{quote(user_id)}")
                if status != 200:
                    print(f"note: could not delete {user_id}: {status} {payload}", file=sys.stderr)
    except BenchError as error:
        print(f"skill_families: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"{arguments.base_url}: {error} (is the server running?)", file=sys.stderr)
        return 1
    for half, figures in scores.items():
        print(f"\n== {half}" + (" families" if half == "all" else " half"))
        for line in figures.lines():
            print(line)
    print(f"\nload average at end (1/5/15 min): {load_average()}")
    if arguments.json_out is not None:
        document = {
            "date": started_at.isoformat(),
            "command": command,
            "halves": {half: vars(figures) for half, figures in scores.items()},
        }
        arguments.json_out.write_text(json.dumps(document, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
