"""A client that pauses between requests keeps its connection: the web server `make run`
starts (``launcher.web_command``) holds idle connections open longer than a client waits, so
a reused socket is never one the server has closed. The MIRIX client (one ``requests``
session) polls with pauses of about 2 s, gunicorn's default keep-alive."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest
import requests
from django.db import connection

from mirix_site.launcher import PROJECT_DIR, web_command
from tests.factories import TenantFixture, chat_turns

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _free_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


@pytest.fixture
def web_server(org: TenantFixture, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The real web server on the test database, one worker (what it does is per socket)."""
    parts = urlsplit(os.environ["DATABASE_URL"])
    database_url = urlunsplit(parts._replace(path="/" + connection.settings_dict["NAME"]))
    port = _free_port()
    # web_command reads the worker count from this process's environment.
    monkeypatch.setenv("WEB_CONCURRENCY", "1")
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "mirix_site.settings.test",
        "DATABASE_URL": database_url,
    }
    process = subprocess.Popen(  # noqa: S603 - our own server
        web_command(port=port),
        cwd=PROJECT_DIR,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except (requests.ConnectionError, requests.Timeout):
                pass  # not listening yet, or still loading Django on a busy machine
            assert process.poll() is None and time.monotonic() < deadline, "web did not start"
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)


def test_a_connection_idle_longer_than_a_clients_pause_still_answers(
    web_server: str, org: TenantFixture
) -> None:
    # http.client reuses its socket as it is, like a pooled client that has not yet seen the
    # server's close: a request on a socket the server closed fails (RemoteDisconnected).
    address = urlsplit(web_server)
    client = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    headers = {"X-API-Key": org.key, "Content-Type": "application/json"}
    body = json.dumps({"user_id": "sam", "messages": chat_turns("a turn", "noted")})
    try:
        client.request("POST", "/memory/add", body, headers)
        assert client.getresponse().read() and client.sock is not None
        # Beyond gunicorn's default keep-alive (2 s, checked about once a second).
        for pause in (2.2, 4.5):
            time.sleep(pause)
            client.request("GET", "/memory/search?user_id=sam&query=turn", headers=headers)
            response = client.getresponse()
            assert response.status == 200, response.read()[:300]
            response.read()
    finally:
        client.close()
