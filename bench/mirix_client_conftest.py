"""The conftest that replaces MIRIX's ``tests/conftest.py`` when ``bench/mirix_client_tests.py``
runs MIRIX's own client tests against this server. It is copied into the exported MIRIX tests and
runs inside the MIRIX client's virtualenv, so it imports nothing of this project.

MIRIX's conftest provisions organizations, clients and keys in-process through MIRIX's server
managers; here the same fixtures (``api_key_factory``, ``api_auth``, and main's async
``_create_client_and_key``) provision through this project's management commands instead. Apart
from that it changes only where requests go and which key they carry:

- requests to the hard-coded ``http://localhost:8000`` go to ``MXC_TARGET_URL`` (``requests``
  ``Session.request`` and ``httpx`` ``send`` are redirected, so test bodies stay untouched);
- a ``MirixClient`` built without an API key but with a ``client_id`` (main's header identity,
  ``X-Client-ID``/``X-Org-ID``, which this server does not accept) gets a key provisioned for
  that client and organization.

With ``MXC_ADAPT_CLIENT=1`` (the harness's ``--adapt-client``) it also gets the client past what
stops MIRIX's tests before this server is asked anything, to see how the server answers them.
That goes beyond "only the URL, the key and the provisioning"; it is not a faithful run:

- the 0.1.7 client takes the arguments MIRIX's dev tests pass but it no longer has
  (``client_name``, ``client_scope``, ``client_id``, ``org_id``, ``config_path``...): unknown
  keyword arguments are dropped, ``config_path`` is read into ``config`` (as main's client does),
  and a client named by ``client_id`` gets a key as above;
- main's ``AgentState``, which forbids the ``memory`` field the 0.1.7 client requires and knows
  ``knowledge_vault_memory_agent`` where 0.1.7 knows ``knowledge_memory_agent``, is given agents
  without ``memory`` and with the type renamed.

It also records what happened for the harness's summary: every HTTP answer (``MXC_HTTP_LOG``) and
every test report (``MXC_RESULTS``), one JSON object a line, each naming the test it belongs to.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import os
import re
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

TARGET_URL = os.environ["MXC_TARGET_URL"].rstrip("/")
PROJECT_DIR = Path(os.environ["MXC_PROJECT_DIR"])
DATA_DIR = os.environ["MXC_DATA_DIR"]
HTTP_LOG = os.environ.get("MXC_HTTP_LOG", "")
ADAPT_CLIENT = os.environ.get("MXC_ADAPT_CLIENT") == "1"
RESULTS = os.environ.get("MXC_RESULTS", "")
# The server the MIRIX tests hard-code (and the default of MIRIX's conftest).
HARD_CODED_URLS = ("http://localhost:8000", "http://127.0.0.1:8000")
BODY_CHARS = 400

# MIRIX's conftest defaults.
TEST_ORG_ID = "demo-org"
TEST_CLIENT_ID = "demo-client-id"

_lock = threading.RLock()
# MIRIX's organization id -> this server's; (MIRIX org id, MIRIX client id) -> this server's client.
# Each run provisions fresh organizations: MIRIX's ids are names here, never reused across runs.
_organizations: dict[str, str] = {}
_clients: dict[tuple[str, str], str] = {}
_key_checked = False


# --- where requests go, and what they answered ---------------------------------------------------


def _redirected(url: str) -> str:
    for prefix in HARD_CODED_URLS:
        if url == prefix or url.startswith((prefix + "/", prefix + "?")):
            return TARGET_URL + url[len(prefix) :]
    return url


def _current_test() -> str:
    # Set by pytest for the test being run: "tests/test_x.py::test_y (setup)".
    return os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]


def _append(path: str, entry: dict[str, Any]) -> None:
    if not path:
        return
    with _lock, open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps(entry) + "\n")


def _log_answer(method: str, url: str, status: int, body: str) -> None:
    path = re.sub(r"^[a-z]+://[^/]+", "", url)
    _append(
        HTTP_LOG,
        {
            "test": _current_test(),
            "method": method.upper(),
            "path": path,
            "status": status,
            "body": body[:BODY_CHARS],
        },
    )


def _patch_requests() -> None:
    original = requests.Session.request

    @functools.wraps(original)
    def request(self: requests.Session, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        response = original(self, method, _redirected(str(url)), *args, **kwargs)
        _log_answer(method, response.url, response.status_code, response.text)
        return response

    requests.Session.request = request  # type: ignore[method-assign]


def _patch_httpx() -> None:
    try:
        import httpx
    except ImportError:  # the 0.1.7 client uses requests only
        return

    def rewrite(request: httpx.Request) -> None:
        target = _redirected(str(request.url))
        if target != str(request.url):
            request.url = httpx.URL(target)
            request.headers["Host"] = request.url.netloc.decode()

    original_async = httpx.AsyncClient.send

    @functools.wraps(original_async)
    async def send_async(
        self: httpx.AsyncClient, request: httpx.Request, *args: Any, **kwargs: Any
    ) -> httpx.Response:
        rewrite(request)
        response = await original_async(self, request, *args, **kwargs)
        await response.aread()
        _log_answer(request.method, str(request.url), response.status_code, response.text)
        return response

    original_sync = httpx.Client.send

    @functools.wraps(original_sync)
    def send_sync(
        self: httpx.Client, request: httpx.Request, *args: Any, **kwargs: Any
    ) -> httpx.Response:
        rewrite(request)
        response = original_sync(self, request, *args, **kwargs)
        response.read()
        _log_answer(request.method, str(request.url), response.status_code, response.text)
        return response

    httpx.AsyncClient.send = send_async  # type: ignore[method-assign]
    httpx.Client.send = send_sync  # type: ignore[method-assign]


# --- provisioning through this project's management commands ------------------------------------


def _manage(*arguments: str) -> str:
    python = str(PROJECT_DIR / ".venv" / "bin" / "python")
    command = [python, "-m", "mirix_site.launcher", "exec", "--", python, "manage.py", *arguments]
    completed = subprocess.run(  # noqa: S603 - this project's own manage.py, fixed arguments
        command,
        cwd=PROJECT_DIR,
        env={**os.environ, "MIRIX_DATA_DIR": DATA_DIR},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(
            f"manage.py {' '.join(arguments)} exited {completed.returncode}: "
            f"{(completed.stderr or completed.stdout).strip()[-800:]}"
        )
    return completed.stdout


def _field(output: str, label: str) -> str:
    match = re.search(rf"^{label}:\s+(\S+)\s*$", output, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no {label!r} in manage.py output: {output[-800:]}")
    return match.group(1)


def _check_key(api_key: str) -> None:
    """The first key must work at MXC_TARGET_URL: a key from another data directory would make
    every test fail with 401, which says nothing about the server."""
    global _key_checked  # noqa: PLW0603 - once per session
    if _key_checked:
        return
    response = requests.get(
        f"{TARGET_URL}/users", headers={"X-API-Key": api_key}, params={"limit": 1}, timeout=30
    )
    if response.status_code == 401:
        pytest.exit(
            f"a key provisioned in {DATA_DIR} is refused by {TARGET_URL} (401): the server runs "
            "on another data directory (--data-dir)",
            returncode=3,
        )
    _key_checked = True


def _exists(error: RuntimeError) -> bool:
    return "already exists" in str(error)


def provision(client_id: str, org_id: str) -> dict[str, str]:
    """A fresh API key for MIRIX's client ``client_id`` of organization ``org_id``, both kept
    under MIRIX's ids (``create_tenant --id --client-id``, ``create_client --id``) as MIRIX's
    ``api_key_factory`` creates them, so that what the tests compare with their ids
    (``created_by_id``) reads the same; a client seen before, in this run or an earlier one on
    the same data directory, gets a new key, like MIRIX's ``_issue_key``. Returns this
    server's ids."""
    with _lock:
        if (org_id, client_id) not in _clients:
            try:
                output = _manage(
                    "create_tenant", org_id, "--id", org_id, "--client", client_id,
                    "--client-id", client_id, "--key-name", "mirix-client-tests",
                )  # fmt: skip
            except RuntimeError as error:
                if not _exists(error):
                    raise
                try:
                    output = _manage("create_client", org_id, client_id, "--id", client_id, "--key")
                except RuntimeError as error:
                    if not _exists(error):
                        raise
                    output = ""
            _organizations[org_id] = org_id
            _clients[(org_id, client_id)] = client_id
            if output:
                api_key = _field(output, "api key")
                _check_key(api_key)
                return {"api_key": api_key, "org_id": org_id, "client_id": client_id}
        output = _manage("create_api_key", client_id, "--name", "mirix-client-tests").strip()
        api_key = output.splitlines()[-1]
        _check_key(api_key)
        return {"api_key": api_key, "org_id": org_id, "client_id": client_id}


def _patch_header_identity() -> None:
    """main's MirixClient without an API key identifies itself with X-Client-ID/X-Org-ID; this
    server authenticates by key only, so such a client gets a key for that client and org."""
    from mirix.client import MirixClient

    original: Callable[..., None] = MirixClient.__init__
    if "client_id" not in inspect.signature(original).parameters:
        return  # the 0.1.7 client has no header identity

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        if not args and kwargs.get("api_key") is None and kwargs.get("client_id"):
            org_id = kwargs.get("org_id") or TEST_ORG_ID
            kwargs["api_key"] = provision(kwargs["client_id"], org_id)["api_key"]
        original(self, *args, **kwargs)

    MirixClient.__init__ = init  # type: ignore[method-assign]


def _agent_for_main(data: dict[str, Any]) -> dict[str, Any]:
    """An agent as this server answers it (for the 0.1.7 client), as main's AgentState takes it."""
    data = {k: v for k, v in data.items() if k != "memory"}
    if data.get("agent_type") == "knowledge_memory_agent":
        data["agent_type"] = "knowledge_vault_memory_agent"
    if isinstance(data.get("children"), list):
        data["children"] = [
            _agent_for_main(c) if isinstance(c, dict) else c for c in data["children"]
        ]
    return data


def _adapt_agent_state() -> None:
    from mirix.schemas.agent import AgentState

    if "memory" in AgentState.model_fields:
        return  # the 0.1.7 schema: agents as this server answers them
    original = AgentState.__init__

    @functools.wraps(original)
    def init(self: Any, **data: Any) -> None:
        original(self, **_agent_for_main(data))

    AgentState.__init__ = init  # type: ignore[method-assign]


def _adapt_stale_calls() -> None:
    """--adapt-client: the client takes the tests' stale arguments (see the module's
    docstring)."""
    import yaml
    from mirix.client import MirixClient

    _adapt_agent_state()

    def adapted(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        accepted = inspect.signature(method).parameters

        @functools.wraps(method)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            if "config_path" in kwargs and "config_path" not in accepted:
                with open(kwargs.pop("config_path"), encoding="utf-8") as config:
                    kwargs["config"] = yaml.safe_load(config)
            dropped = {k: kwargs.pop(k) for k in list(kwargs) if k not in accepted}
            if name == "__init__":
                client_id, org_id = dropped.get("client_id"), dropped.get("org_id")
                if kwargs.get("api_key") is None and client_id:
                    kwargs["api_key"] = provision(client_id, org_id or TEST_ORG_ID)["api_key"]
                method(self, *args, **kwargs)
                # The tests read these back (main's client keeps them too).
                self.client_id, self.org_id = client_id, org_id
                return None
            return method(self, *args, **kwargs)

        return call

    for name, method in list(vars(MirixClient).items()):
        if inspect.isfunction(method) and (name == "__init__" or not name.startswith("_")):
            setattr(MirixClient, name, adapted(name, method))


_patch_requests()
_patch_httpx()
_patch_header_identity()
if ADAPT_CLIENT:
    _adapt_stale_calls()


# --- MIRIX's fixtures, provisioned here -----------------------------------------------------------


@pytest.fixture(scope="session")
def api_key_factory() -> Callable[..., dict[str, str]]:
    """As MIRIX's: a key for a client (created with its organization if needed), also exported
    as MIRIX_API_KEY."""

    def create(client_id: str = TEST_CLIENT_ID, org_id: str = TEST_ORG_ID) -> dict[str, str]:
        auth = provision(client_id, org_id)
        os.environ["MIRIX_API_KEY"] = auth["api_key"]
        os.environ.setdefault("MIRIX_API_URL", TARGET_URL)
        return auth

    return create


@pytest.fixture(scope="session")
def api_auth(api_key_factory: Callable[..., dict[str, str]]) -> dict[str, str]:
    """As MIRIX's: the default client's key."""
    return api_key_factory()


async def _create_client_and_key(
    client_id: str, org_id: str, org_name: str | None = None
) -> dict[str, str]:
    """main's async helper (tests import it from ``conftest``); ``org_name`` is not needed
    here: the organization is named by MIRIX's id."""
    del org_name
    return await asyncio.to_thread(provision, client_id, org_id)


# --- test reports for the harness's summary ------------------------------------------------------


def _report_message(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple):
        return str(longrepr[2])
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    return str(longrepr or "")[-2000:]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _append(
        RESULTS,
        {
            "nodeid": report.nodeid,
            "when": report.when,
            "outcome": report.outcome,
            "message": _report_message(report) if not report.passed else "",
        },
    )


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _append(
            RESULTS,
            {
                "nodeid": report.nodeid,
                "when": "collect",
                "outcome": "failed",
                "message": _report_message(report),
            },
        )
