"""A client that pauses between requests keeps its connection: the web server `make run`
starts (``launcher.web_command``) holds idle connections open longer than a client waits, so
a reused socket is never one the server has closed. The MIRIX client (one ``requests``
session) polls with pauses of about 2 s, gunicorn's default keep-alive."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests import processes
from tests.factories import TenantFixture, chat_turns

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def web_server(org: TenantFixture, tmp_path: Path) -> Iterator[str]:
    """The real web server on the test database, one worker (what it does is per socket)."""
    with processes.web_server(tmp_path) as web:
        yield web.url


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


REFUSALS = {
    "long-url": ({}, "/memory/search?query=" + "q" * 9000, 414, "uri_too_long"),
    "large-header": ({"X-Padding": "p" * 20_000}, "/users", 431, "headers_too_large"),
}


@pytest.mark.parametrize("refusal", REFUSALS)
def test_the_servers_own_refusals_are_in_the_error_shape(
    web_server: str, org: TenantFixture, refusal: str
) -> None:
    """What gunicorn refuses before Django reads it answers in JSON too (mirix_site.webserver),
    as the schema declares for every operation."""
    headers, path, status, code = REFUSALS[refusal]
    address = urlsplit(web_server)
    client = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    try:
        client.request("GET", path, headers={"X-API-Key": org.key, **headers})
        response = client.getresponse()
        assert response.status == status
        assert response.getheader("Content-Type") == "application/json"
        body = json.loads(response.read())
        assert body["code"] == code and body["detail"]
    finally:
        client.close()
