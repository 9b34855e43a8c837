"""Run MIRIX's own client tests against this server, and say which fail and why.

    .venv/bin/python bench/mirix_client_tests.py --ref dev  --url http://127.0.0.1:8531
    .venv/bin/python bench/mirix_client_tests.py --ref main --url http://127.0.0.1:8531

For a ref of the MIRIX repository (``dev``: the 0.1.7 client's branch; ``main``: the newer, async
one) this

1. makes the client's virtualenv, apart from the project's: ``dev`` installs ``mirix==0.1.7``
   from PyPI; ``main`` builds the client package from the ref's source the way MIRIX builds it
   (``scripts/packaging/setup_client.py`` with ``pyproject.toml`` set aside) and installs it,
   with ``httpx``, which that client imports but its requirements omit. A virtualenv is reused
   while it holds the same client (``--reinstall`` makes it anew);
2. exports the ref's ``tests/``, ``pytest.ini`` and the data the tests read (``mirix/configs``,
   ``mirix/prompts``) into a work directory. The MIRIX package source is not put there: the
   tests add the directory to ``sys.path``, and the installed client must be what they import;
3. selects the test modules that drive the REST API through ``MirixClient``: those that build
   one and import nothing of MIRIX's server (its ORM, managers, queue, ``sqlalchemy``) and do not
   mock the client's ``_request``;
4. replaces MIRIX's ``tests/conftest.py`` with ``bench/mirix_client_conftest.py``, which
   provisions organizations, clients and keys with this project's management commands (on
   ``--data-dir``, the server's) and sends the tests' ``localhost:8000`` to ``--url``. Test
   bodies are not changed. ``GEMINI_API_KEY`` is set to a placeholder when unset: MIRIX skips
   most modules without it, and the client never sends it;
5. with ``--adapt-client`` (not a faithful run), gets the client past what stops the tests
   before the server is asked: dev's tests pass arguments the 0.1.7 client no longer has, and
   main's client rejects the agents this server answers for 0.1.7 (see the conftest);
6. runs pytest there (``-m ""``: main's ``pytest.ini`` deselects its integration tests) and
   prints the counts and, for each test that did not pass, its one-line cause and the non-2xx
   answers the server gave during it.

The work directory keeps ``pytest.log``, ``results.jsonl`` (each test phase) and ``http.jsonl``
(each answer, with the test it belongs to). The run takes minutes: MIRIX's tests sleep while
they wait for memories to be extracted.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent
CONFTEST = Path(__file__).resolve().parent / "mirix_client_conftest.py"
DEFAULT_MIRROR = Path("/work/.mirror/Mirix-AI+MIRIX/repo")
DEFAULT_URL = "http://127.0.0.1:8531"
PUBLISHED_CLIENT = "mirix==0.1.7"
TEST_REQUIREMENTS = {
    "dev": ["pytest>=8", "requests", "python-dotenv", "pyyaml"],
    "main": ["pytest>=8", "pytest-asyncio>=0.24", "httpx", "requests", "python-dotenv", "pyyaml"],
}
# What the tests read from the repository besides tests/: config files and system prompts.
EXPORTED_PATHS = ("tests", "pytest.ini", "mirix/configs", "mirix/prompts")
# Modules of the MIRIX client package (scripts/packaging/setup_client.py); any other mirix.*
# import is the server's.
CLIENT_MODULES = {"client", "schemas", "helpers", "constants", "log", "settings", "system"}
OUTCOME_ORDER = ("failed", "error", "skipped", "passed")
CAUSE_CHARS = 400
# MIRIX's admin routes, which main's client calls on every MirixClient.create() and
# initialize_meta_agent() and whose failure it ignores: listed once, not per test.
ADMIN_ROUTES = ("/organizations/create_or_get", "/clients/create_or_get")


def run(command: Sequence[str | Path], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - fixed commands of this script
        [str(part) for part in command], text=True, check=False, **kwargs
    )


def git(mirror: Path, *arguments: str) -> str:
    completed = run(["git", "-C", mirror, *arguments], capture_output=True)
    if completed.returncode != 0:
        raise SystemExit(f"git {' '.join(arguments)}: {completed.stderr.strip()}")
    return completed.stdout


def export(mirror: Path, commit: str, paths: Sequence[str], destination: Path) -> None:
    """``git archive`` of ``paths`` at ``commit``, unpacked into ``destination``."""
    present = [p for p in paths if git(mirror, "ls-tree", "--name-only", commit, p).strip()]
    completed = subprocess.run(  # noqa: S603 - git with fixed arguments
        ["git", "-C", str(mirror), "archive", "--format=tar", commit, *present],  # noqa: S607
        capture_output=True,
        check=False,
    )
    if completed.returncode != 0:
        raise SystemExit(f"git archive: {completed.stderr.decode().strip()}")
    with tarfile.open(fileobj=BytesIO(completed.stdout)) as archive:
        archive.extractall(destination, filter="data")


# --- the client's virtualenv --------------------------------------------------------------------


def pip(venv: Path, *arguments: str | Path, log: Path) -> None:
    with open(log, "a", encoding="utf-8") as output:
        completed = run(
            [venv / "bin" / "python", "-m", "pip", "install", "--quiet", *arguments],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    if completed.returncode != 0:
        raise SystemExit(f"pip install {' '.join(map(str, arguments))} failed; see {log}")


def build_main_client(venv: Path, mirror: Path, commit: str, log: Path) -> Path:
    """The client wheel of ``commit``, built as MIRIX's build_packages.sh builds it."""
    source = Path(tempfile.mkdtemp(prefix="mxc-client-src-"))
    export(mirror, commit, ["."], source)
    # build_packages.sh hides pyproject.toml: it would make setuptools package the whole server.
    (source / "pyproject.toml").unlink(missing_ok=True)
    pip(venv, "setuptools", "wheel", log=log)
    dist = source / "dist"
    with open(log, "a", encoding="utf-8") as output:
        completed = run(
            [
                venv / "bin" / "python",
                "scripts/packaging/setup_client.py",
                "--package-name",
                "mirix",
                "bdist_wheel",
                "-d",
                dist,
            ],
            cwd=source,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    wheels = sorted(dist.glob("mirix-*.whl"))
    if completed.returncode != 0 or not wheels:
        raise SystemExit(f"building the client of {commit[:7]} failed; see {log}")
    return wheels[0]


def client_venv(venv: Path, ref: str, mirror: Path, commit: str, *, reinstall: bool) -> str:
    """Make (or reuse) the virtualenv with the client of ``ref``; returns what it holds."""
    wanted = PUBLISHED_CLIENT if ref == "dev" else f"mirix client built from {ref}@{commit}"
    marker = venv / "mirix-client-tests.txt"
    if not reinstall and marker.exists() and marker.read_text().strip() == wanted:
        return wanted
    print(f"making {venv} with {wanted} ...", flush=True)
    if run([sys.executable, "-m", "venv", "--clear", venv]).returncode != 0:
        raise SystemExit(f"could not make the virtualenv {venv}")
    log = venv / "mirix-client-tests-install.log"
    if ref == "dev":
        pip(venv, PUBLISHED_CLIENT, *TEST_REQUIREMENTS[ref], log=log)
    else:
        wheel = build_main_client(venv, mirror, commit, log)
        pip(venv, wheel, *TEST_REQUIREMENTS[ref], log=log)
        shutil.rmtree(wheel.parent.parent, ignore_errors=True)
    marker.write_text(wanted + "\n")
    return wanted


# --- which tests ---------------------------------------------------------------------------------


def exclusion(source: str) -> str | None:
    """Why a test module is not one that drives the REST API through MirixClient, or None."""
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "sqlalchemy":
                return "queries the server's database (sqlalchemy)"
            if parts[0] == "mirix" and len(parts) > 1 and parts[1] not in CLIENT_MODULES:
                return f"imports the server in-process ({name})"
    if re.search(r"patch\.object\(\s*MirixClient\s*,\s*[\"']_request", source):
        return "mocks MirixClient._request (no server)"
    if not re.search(r"MirixClient(\.create)?\(", source):
        return "builds no MirixClient"
    return None


def select(tests_dir: Path) -> tuple[list[str], dict[str, str]]:
    selected, excluded = [], {}
    for path in sorted(tests_dir.glob("test_*.py")):
        relative = f"tests/{path.name}"
        reason = exclusion(path.read_text(encoding="utf-8"))
        if reason is None:
            selected.append(relative)
        else:
            excluded[relative] = reason
    return selected, excluded


# --- the summary ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    outcome: str = "passed"
    message: str = ""
    answers: list[dict[str, object]] = field(default_factory=list)


def read_jsonl(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def outcomes(results: Path, http_log: Path) -> dict[str, Outcome]:
    """Each test's outcome from its phases: a failed call is a failure, a failed setup,
    teardown or collection an error, a skip in any phase a skip."""
    tests: dict[str, Outcome] = {}
    for entry in read_jsonl(results):
        test = tests.setdefault(str(entry["nodeid"]), Outcome())
        if entry["outcome"] == "failed":
            test.outcome = "failed" if entry["when"] == "call" else "error"
            test.message = test.message or str(entry["message"])
        elif entry["outcome"] == "skipped" and test.outcome == "passed":
            test.outcome, test.message = "skipped", str(entry["message"])
    for answer in read_jsonl(http_log):
        if answer["test"] in tests:
            tests[str(answer["test"])].answers.append(answer)
    return tests


def pydantic_kind(match: re.Match[str]) -> str:
    """``[type=enum, input_value='x', input_type=str]`` -> ``[enum: 'x']``, long values left
    out."""
    kind, value = match.group(1), match.group(2)
    return f"[{kind}: {value}]" if len(value) <= 40 else f"[{kind}]"


def one_line(text: str) -> str:
    """A cause on one line: the exception line, then its distinct detail lines (pydantic's
    per-item errors folded: ``children.3.memory`` -> ``children.*.memory``)."""
    lines = []
    for raw in text.strip().splitlines():
        line = re.sub(r"(?<=[A-Za-z_])\.\d+\.(?=[A-Za-z_])", ".*.", raw.strip())
        line = re.sub(r"\[type=(\w+), input_value=(.*?), input_type=\w+\]", pydantic_kind, line)
        line = re.sub(r"Input should be '.*' or '[^']*'", "Input should be one of the enum", line)
        if line and not line.startswith("For further information") and line not in lines:
            lines.append(line)
    line = " | ".join(lines)
    return line if len(line) <= CAUSE_CHARS else line[: CAUSE_CHARS - 3] + "..."


def route(answer: dict[str, object]) -> tuple[str, str, int]:
    return str(answer["method"]), str(answer["path"]).split("?")[0], int(str(answer["status"]))


def non_2xx(answers: list[dict[str, object]]) -> str:
    """The non-2xx answers of a test (MIRIX's admin routes aside), each route and status once
    with its count, and the last one's body."""
    bad = [a for a in answers if not 200 <= route(a)[2] < 300 and route(a)[1] not in ADMIN_ROUTES]
    if not bad:
        return ""
    counts = Counter(route(a) for a in bad)
    routes = ", ".join(
        f"{method} {path} {status}" + (f" (x{n})" if n > 1 else "")
        for (method, path, status), n in counts.items()
    )
    return f"{routes}; last body: {one_line(str(bad[-1]['body']))}"


def summarize(tests: dict[str, Outcome]) -> int:
    counts = Counter(test.outcome for test in tests.values())
    admin = Counter(
        route(a) for test in tests.values() for a in test.answers if route(a)[1] in ADMIN_ROUTES
    )
    print()
    print(
        f"passed {counts['passed']}, failed {counts['failed']}, errors {counts['error']}, "
        f"skipped {counts['skipped']} ({len(tests)} tests; errors are failures in fixtures)"
    )
    for outcome in OUTCOME_ORDER[:-1]:
        for nodeid, test in tests.items():
            if test.outcome != outcome:
                continue
            print(f"\n{outcome.upper():8} {nodeid}")
            print(f"    cause: {one_line(test.message)}")
            answers = non_2xx(test.answers)
            if answers:
                print(f"    non-2xx: {answers}")
    if admin:
        listed = ", ".join(f"{m} {p} {status} (x{n})" for (m, p, status), n in admin.items())
        print(
            f"\nMIRIX admin routes (out of scope here; the client ignores their failure): {listed}"
        )
    return 0 if counts["failed"] + counts["error"] == 0 else 1


# --- main ----------------------------------------------------------------------------------------


def server_healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=10) as response:  # noqa: S310
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ref", choices=("dev", "main"), required=True, help="MIRIX branch")
    parser.add_argument("--url", default=DEFAULT_URL, help="this server (default %(default)s)")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("MIRIX_DATA_DIR") or PROJECT_DIR / ".mirix-data"),
        help="the server's MIRIX_DATA_DIR, where manage.py provisions (default: $MIRIX_DATA_DIR "
        "or .mirix-data)",
    )
    parser.add_argument("--mirror", type=Path, default=DEFAULT_MIRROR, help="MIRIX git dir")
    parser.add_argument("--venv", type=Path, help="client virtualenv (/tmp/mxc-venv-REF)")
    parser.add_argument("--reinstall", action="store_true", help="make the virtualenv anew")
    parser.add_argument(
        "--workdir", type=Path, help="where the tests go (emptied first; default: a new temp dir)"
    )
    parser.add_argument(
        "--tests", nargs="+", metavar="FILE", help="run these tests/ files instead of the selection"
    )
    parser.add_argument(
        "--adapt-client",
        action="store_true",
        help="get the client past what stops the tests before the server is asked (dev: "
        "stale arguments; main: AgentState without memory, knowledge_vault type) to see how "
        "the server answers them; not a faithful run",
    )
    parser.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments (-k ...)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = parse(argv)
    url = arguments.url.rstrip("/")
    if not server_healthy(url):
        raise SystemExit(f"no healthy server at {url}/health")
    commit = git(arguments.mirror, "rev-parse", arguments.ref).strip()
    venv = arguments.venv or Path(f"/tmp/mxc-venv-{arguments.ref}")  # noqa: S108
    client = client_venv(
        venv, arguments.ref, arguments.mirror, commit, reinstall=arguments.reinstall
    )

    workdir = arguments.workdir or Path(tempfile.mkdtemp(prefix=f"mxc-tests-{arguments.ref}-"))
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    export(arguments.mirror, commit, EXPORTED_PATHS, workdir)
    shutil.copyfile(CONFTEST, workdir / "tests" / "conftest.py")
    selected, excluded = select(workdir / "tests")
    if arguments.tests:
        selected = [f"tests/{Path(name).name}" for name in arguments.tests]

    print(f"MIRIX tests at {arguments.ref} ({commit[:7]}), client: {client} ({venv})")
    if arguments.adapt_client:
        print("--adapt-client: the client is adapted (see the conftest); not a faithful run")
    print(f"server: {url}, provisioning in {arguments.data_dir}; work directory: {workdir}")
    print("selected: " + ", ".join(selected))
    for path, reason in excluded.items():
        print(f"excluded: {path}: {reason}")
    print(flush=True)

    results, http_log, pytest_log = (
        workdir / "results.jsonl",
        workdir / "http.jsonl",
        workdir / "pytest.log",
    )
    environment = {
        **{k: v for k, v in os.environ.items() if k not in {"MIRIX_API_KEY", "VIRTUAL_ENV"}},
        "MIRIX_API_URL": url,
        "GEMINI_API_KEY": os.environ.get("GEMINI_API_KEY") or "placeholder-unused-by-the-client",
        "MXC_TARGET_URL": url,
        "MXC_PROJECT_DIR": str(PROJECT_DIR),
        "MXC_DATA_DIR": str(arguments.data_dir.resolve()),
        "MXC_HTTP_LOG": str(http_log),
        "MXC_RESULTS": str(results),
        "PYTHONDONTWRITEBYTECODE": "1",
        "MXC_ADAPT_CLIENT": "1" if arguments.adapt_client else "0",
    }
    command = [
        venv / "bin" / "python",
        "-m",
        "pytest",
        *selected,
        "-m",
        "",
        "-p",
        "no:cacheprovider",
        *arguments.pytest_args,
    ]
    # pytest's own output goes to the terminal and to pytest.log.
    with open(pytest_log, "w", encoding="utf-8") as log:
        process = subprocess.Popen(  # noqa: S603 - the client virtualenv's pytest
            [str(part) for part in command],
            cwd=workdir,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            log.write(line)
        process.wait()

    print(f"\npytest exited {process.returncode}; logs in {workdir}")
    return summarize(outcomes(results, http_log))


if __name__ == "__main__":
    sys.exit(main())
