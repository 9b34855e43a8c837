"""images.fetch refuses every way of reaching this server's network, and fetches real images.

No test may let a packet leave this machine, even when the guard has a bug: every test runs with
the fetcher's connect step wrapped by a recorder that fails the test on any attempt to reach a
non-loopback address it was not told to expect (and refuses those it was), and with the real
resolver functions failing the test on any lookup but of a numeric loopback address. Names are
answered by a fake resolver. Only loopback servers started here are ever connected to; the
canary must see no connection at all.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from images import fetch as fetch_module
from images.fetch import MAX_REDIRECTS, FetchedImage, ImageFetchError, image_fetch, url_check

IMAGE = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
PUBLIC = "93.184.216.34"
PUBLIC_V6 = "2606:2800:220:1:248:1893:25c8:1946"
NAMES: dict[str, list[str]] = {
    "images.test": ["127.0.0.1"],
    "other-images.test": ["127.0.0.1"],
    "localhost": ["127.0.0.1", "::1"],
    "loopback-name.test": ["127.0.0.2"],
    "127.0.0.1.nip.io": ["127.0.0.1"],
    "mapped-loopback.test": ["::ffff:127.0.0.1"],
    "public.test": [PUBLIC],
    "public6.test": [PUBLIC_V6],
    "metadata.test": ["169.254.169.254"],
    "intranet.test": ["10.1.2.3"],
    "ula.test": ["fd12:3456::1"],
    "mixed.test": [PUBLIC, "10.0.0.5"],
    "mixed6.test": [PUBLIC_V6, "fe80::1"],
    "allowed-private.test": ["192.168.0.10"],
    "allowed-metadata.test": ["169.254.169.254"],
    "allowed-mixed.test": ["127.0.0.1", "10.0.0.1"],
    "empty.test": [],
    "garbage.test": ["not an address"],
}
ALLOW = frozenset(
    {
        "images.test",
        "other-images.test",
        "allowed-private.test",
        "allowed-metadata.test",
        "allowed-mixed.test",
    }
)
_LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


class ConnectRecorder:
    """Stands in for ``images.fetch._connect``: loopback is really connected to, an address a
    test expects is refused (no traffic), anything else fails the test."""

    def __init__(self, real: Callable[[str, int, float], socket.socket]) -> None:
        self.real = real
        self.attempts: list[tuple[str, int]] = []
        self.expected: set[str] = set()

    def __call__(self, address: str, port: int, timeout: float) -> socket.socket:
        self.attempts.append((address, port))
        if any(ipaddress.ip_address(address) in network for network in _LOOPBACK):
            return self.real(address, port, timeout)
        if address in self.expected:
            raise ConnectionRefusedError(f"{address} blocked by the test's recorder")
        pytest.fail(f"the fetcher tried to connect to {address}:{port}")


class FakeResolver:
    """The tests' DNS: scripted answers per name (a list, or a function of the call's number)."""

    def __init__(self, answers: dict[str, Any] | None = None) -> None:
        self.answers: dict[str, Any] = {**NAMES, **(answers or {})}
        self.calls: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        if host not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        answer = self.answers[host]
        return list(answer(self.calls.count(host)) if callable(answer) else answer)


Route = Callable[[BaseHTTPRequestHandler], None]


class ScriptedServer(ThreadingHTTPServer):
    """A real HTTP(S) server on 127.0.0.1 answering each path with a scripted route; it counts
    the connections it accepts and records each request's path and Host header."""

    daemon_threads = True

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[tuple[str, str]] = []
        self.connections = 0
        self.stopping = threading.Event()
        super().__init__(("127.0.0.1", 0), _Handler)
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)

    def server_bind(self) -> None:
        # HTTPServer's own server_bind looks this machine's name up (getfqdn): not needed here.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "127.0.0.1", self.server_address[1]

    def verify_request(self, request: Any, client_address: Any) -> bool:
        self.connections += 1
        return True

    @property
    def port(self) -> int:
        return self.server_address[1]


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedServer

    def do_GET(self) -> None:
        self.server.requests.append((self.path, self.headers.get("Host", "")))
        route = self.server.routes.get(self.path, reply(404, b"no such route", "text/plain"))
        # The fetcher hangs up as soon as it has seen enough.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            route(self)

    def log_message(self, format: str, *args: Any) -> None:
        return


def reply(
    status: int = 200,
    body: bytes = IMAGE,
    content_type: str | None = "image/png",
    headers: dict[str, str] | None = None,
) -> Route:
    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        if content_type is not None:
            handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(body)

    return route


def redirect(location: str, status: int = 302) -> Route:
    return reply(status, b"", None, {"Location": location})


def stream(chunks: Iterator[bytes], *, headers: dict[str, str] | None = None) -> Route:
    """An image/png body written chunk by chunk, read by the client until the connection closes."""

    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        for name, value in {"Content-Type": "image/png", **(headers or {})}.items():
            handler.send_header(name, value)
        handler.end_headers()
        for chunk in chunks:
            handler.wfile.write(chunk)
            handler.wfile.flush()

    return route


@contextlib.contextmanager
def served(tls: ssl.SSLContext | None = None) -> Iterator[ScriptedServer]:
    server = ScriptedServer(tls)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
    thread.start()
    try:
        yield server
    finally:
        server.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(autouse=True)
def recorder(monkeypatch: pytest.MonkeyPatch) -> ConnectRecorder:
    recorder = ConnectRecorder(fetch_module._connect)
    monkeypatch.setattr(fetch_module, "_connect", recorder)
    return recorder


@pytest.fixture(autouse=True)
def no_real_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    real_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in ("127.0.0.1", "::1"):
            pytest.fail(f"a real DNS lookup of {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    def no_lookup(host: Any, *args: Any) -> Any:
        pytest.fail(f"a real DNS lookup of {host!r}")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket, "gethostbyname", no_lookup)
    monkeypatch.setattr(socket, "gethostbyname_ex", no_lookup)


@pytest.fixture
def resolver() -> FakeResolver:
    return FakeResolver()


@pytest.fixture
def canary() -> Iterator[ScriptedServer]:
    """A loopback server that must never be reached: every loopback payload points at it."""
    with served() as server:
        server.routes["/"] = server.routes["/a.png"] = reply()
        yield server


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with served() as server:
        yield server


@pytest.fixture
def other_server() -> Iterator[ScriptedServer]:
    with served() as server:
        yield server


def fetch(url: str, resolver: Callable[[str, int], list[str]], **options: Any) -> FetchedImage:
    return image_fetch(
        url=url,
        max_bytes=options.pop("max_bytes", 100_000),
        timeout=options.pop("timeout", 2.0),
        allow_hosts=options.pop("allow_hosts", ALLOW),
        resolver=resolver,
        **options,
    )


# (URL, refused by url_check already: from its text alone). {port} is the canary's.
PAYLOADS = [
    # Schemes other than http(s), and URLs without one.
    ("file:///etc/passwd", True),
    ("ftp://images.test/a.png", True),
    ("gopher://127.0.0.1:{port}/_GET%20/", True),
    ("dict://127.0.0.1:{port}/info", True),
    ("data:image/png;base64,iVBORw0KGgo=", True),
    ("//127.0.0.1:{port}/a.png", True),
    ("images.test/a.png", True),
    ("http:/127.0.0.1:{port}/a.png", True),
    # Credentials, and the host hidden behind them.
    ("http://evil@127.0.0.1:{port}/a.png", True),
    ("http://public.test@127.0.0.1:{port}/a.png", True),
    ("http://user:secret@public.test/a.png", True),
    ("http://127.0.0.1:{port}\\@public.test/a.png", True),
    # Loopback in every spelling, at the canary.
    ("http://127.0.0.1:{port}/a.png", True),
    ("http://127.0.0.1.:{port}/a.png", True),
    ("http://127.1:{port}/a.png", True),
    ("http://127.0.1:{port}/a.png", True),
    ("http://2130706433:{port}/a.png", True),
    ("http://0x7f000001:{port}/a.png", True),
    ("http://0x7f.0.0.1:{port}/a.png", True),
    ("http://0x7F.1:{port}/a.png", True),
    ("http://0177.0.0.1:{port}/a.png", True),
    ("http://017700000001:{port}/a.png", True),
    ("http://127.000.000.001:{port}/a.png", True),
    ("http://\uff11\uff12\uff17\u3002\uff10\u3002\uff10\u3002\uff11:{port}/a.png", True),
    ("http://[::1]:{port}/a.png", True),
    ("http://[0:0:0:0:0:0:0:1]:{port}/a.png", True),
    ("http://[::ffff:127.0.0.1]:{port}/a.png", True),
    ("http://[::ffff:7f00:1]:{port}/a.png", True),
    ("http://[::127.0.0.1]:{port}/a.png", True),
    ("http://[::ffff:0:7f00:1]:{port}/a.png", True),
    ("http://[2002:7f00:1::]:{port}/a.png", True),
    ("http://[64:ff9b::7f00:1]:{port}/a.png", True),
    ("http://[64:ff9b::127.0.0.1]:{port}/a.png", True),
    ("http://0.0.0.0:{port}/a.png", True),
    ("http://0:{port}/a.png", True),
    ("http://[::]:{port}/a.png", True),
    ("http://localhost:{port}/a.png", False),
    ("http://localhost.:{port}/a.png", False),
    ("http://LOCALHOST:{port}/a.png", False),
    ("http://loopback-name.test:{port}/a.png", False),
    ("http://127.0.0.1.nip.io:{port}/a.png", False),
    ("http://mapped-loopback.test:{port}/a.png", False),
    # Private, carrier-grade NAT and link-local, with the metadata service in several spellings.
    ("http://10.0.0.1/", True),
    ("http://10.255.255.255/", True),
    ("http://172.16.0.1/", True),
    ("http://172.31.255.254/", True),
    ("http://192.168.1.1/", True),
    ("http://100.64.0.1/", True),
    ("http://169.254.169.254/latest/meta-data/", True),
    ("http://169.254.169.254.:80/latest/meta-data/", True),
    ("http://0xa9fea9fe/latest/meta-data/", True),
    ("http://2852039166/latest/meta-data/", True),
    ("http://0251.0376.0251.0376/latest/meta-data/", True),
    ("http://169.254.43518/latest/meta-data/", True),
    ("http://[::ffff:169.254.169.254]/latest/meta-data/", True),
    ("http://[::ffff:a9fe:a9fe]/latest/meta-data/", True),
    ("http://[2002:a9fe:a9fe::1]/latest/meta-data/", True),
    ("http://[64:ff9b::a9fe:a9fe]/latest/meta-data/", True),
    ("http://[fd00:ec2::254]/latest/meta-data/", True),
    ("http://metadata.test/computeMetadata/v1/", False),
    ("http://intranet.test/", False),
    ("https://ula.test/", False),
    # IPv6 local scopes, a zone id, and the transition prefixes refused outright.
    ("http://[fd12:3456::1]/", True),
    ("http://[fc00::1]/", True),
    ("http://[fe80::1]/", True),
    ("http://[fe80::1%25eth0]/", True),
    ("http://[fec0::1]/", True),
    ("http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", True),
    ("http://[64:ff9b:1::a00:1]/", True),
    ("http://[100::1]/", True),
    # Benchmarking, documentation, protocol assignments, multicast, reserved, broadcast.
    ("http://198.18.0.1/", True),
    ("http://198.19.255.1/", True),
    ("http://192.0.2.1/", True),
    ("http://198.51.100.7/", True),
    ("http://203.0.113.9/", True),
    ("http://192.0.0.8/", True),
    ("http://192.88.99.1/", True),
    ("http://224.0.0.1/", True),
    ("http://239.255.255.250:1900/", True),
    ("http://240.0.0.1/", True),
    ("http://255.255.255.255/", True),
    ("http://[2001:db8::1]/", True),
    ("http://[2001:2::1]/", True),
    ("http://[ff02::1]/", True),
    ("http://[ff05::1:3]/", True),
    # Names with more than one answer, one of them internal; allowed names beyond loopback.
    ("http://mixed.test/", False),
    ("http://mixed6.test/", False),
    ("http://allowed-private.test/", False),
    ("http://allowed-metadata.test/latest/meta-data/", False),
    ("http://allowed-mixed.test/", False),
    # Malformed hosts and ports, and names with no usable answer.
    ("http://1.2.3.09/", True),
    ("http://1.2.3.4.5/", True),
    ("http://256.0.0.1/", True),
    ("http://4294967296/", True),
    ("http://images..test/", True),
    ("http://[v1.fe80::1]/", True),
    ("http://images.test:99999/", True),
    ("http://images.test:0/", True),
    ("http:///a.png", True),
    ("http://empty.test/", False),
    ("http://garbage.test/", False),
    ("http://unknown.test/", False),
]


@pytest.mark.parametrize(("url", "textual"), PAYLOADS)
def test_payload_is_refused_before_any_connection(
    url: str,
    textual: bool,
    canary: ScriptedServer,
    recorder: ConnectRecorder,
    resolver: FakeResolver,
) -> None:
    url = url.format(port=canary.port)

    with pytest.raises(ImageFetchError) as refused:
        fetch(url, resolver)

    assert refused.value.transient is False
    assert refused.value.reason
    assert recorder.attempts == []
    assert canary.connections == 0
    assert (url_check(url=url) is not None) is textual


def test_refusal_of_a_name_does_not_say_where_it_resolves(resolver: FakeResolver) -> None:
    with pytest.raises(ImageFetchError) as refused:
        fetch("http://intranet.test/", resolver)

    assert "10.1.2.3" not in refused.value.reason
    assert "intranet.test" in refused.value.reason


def test_a_name_that_does_not_resolve_reads_as_one_that_resolves_privately(
    resolver: FakeResolver,
) -> None:
    """Telling the two apart would map this network's internal names from outside."""
    reasons = []
    for host in ("intranet.test", "nowhere.test"):
        with pytest.raises(ImageFetchError) as refused:
            fetch(f"http://{host}/a.png", resolver)
        reasons.append(refused.value.reason.replace(host, "HOST"))
    assert "nowhere.test" not in resolver.answers
    assert reasons[0] == reasons[1]


@pytest.mark.parametrize(
    "url",
    [
        "https://example.com/a.png",
        "http://93.184.216.34/a.png?size=2",
        f"https://[{PUBLIC_V6}]:8443/a.png",
        "http://b\u00fccher.example/a.png",
        "HTTPS://Example.COM./a.png",
    ],
)
def test_url_check_passes_public_urls(url: str) -> None:
    assert url_check(url=url) is None


@pytest.mark.parametrize(
    ("url", "address", "port"),
    [
        (f"http://{PUBLIC}/a.png", PUBLIC, 80),
        ("http://public.test/a.png", PUBLIC, 80),
        ("https://public6.test/a.png", PUBLIC_V6, 443),
        (f"http://[{PUBLIC_V6}]:8080/a.png", PUBLIC_V6, 8080),
        ("http://1572395042/a.png", PUBLIC, 80),
        ("http://93.12113954/a.png", PUBLIC, 80),
        ("http://0x5d.0xb8.0xd8.0x22/a.png", PUBLIC, 80),
        ("http://0135.0270.0330.042/a.png", PUBLIC, 80),
        (f"http://[::ffff:{PUBLIC}]/a.png", PUBLIC, 80),
        ("http://[2002:5db8:d822::1]/a.png", "2002:5db8:d822::1", 80),
        ("http://[64:ff9b::5db8:d822]/a.png", "64:ff9b::5db8:d822", 80),
    ],
)
def test_public_address_is_attempted_only_at_the_recorder(
    url: str, address: str, port: int, recorder: ConnectRecorder, resolver: FakeResolver
) -> None:
    recorder.expected = {address}

    with pytest.raises(ImageFetchError) as failed:
        fetch(url, resolver)

    assert failed.value.transient is True
    assert recorder.attempts == [(address, port)]


@pytest.mark.parametrize("allowed", [False, True])
def test_a_dns_answer_that_changes_is_not_looked_up_again(
    allowed: bool, canary: ScriptedServer, recorder: ConnectRecorder
) -> None:
    """First a public address, loopback ever after: even allowed to reach loopback, the fetch
    stays on the address it vetted."""
    resolver = FakeResolver({"rebind.test": lambda call: [PUBLIC] if call == 1 else ["127.0.0.1"]})
    recorder.expected = {PUBLIC}
    allow_hosts = ALLOW | {"rebind.test"} if allowed else ALLOW

    with pytest.raises(ImageFetchError) as failed:
        fetch(f"http://rebind.test:{canary.port}/a.png", resolver, allow_hosts=allow_hosts)

    assert failed.value.transient is True
    assert resolver.calls == ["rebind.test"]
    assert recorder.attempts == [(PUBLIC, canary.port)]
    assert canary.connections == 0


def test_an_allowed_host_on_loopback_serves_the_image(
    server: ScriptedServer, recorder: ConnectRecorder, resolver: FakeResolver
) -> None:
    server.routes["/a.png?size=2"] = reply(content_type="IMAGE/PNG; charset=binary")
    url = f"http://IMAGES.test.:{server.port}/a.png?size=2"

    image = fetch(url, resolver)

    assert image == FetchedImage(data=IMAGE, content_type="image/png", url=url)
    assert resolver.calls == ["images.test"]
    assert recorder.attempts == [("127.0.0.1", server.port)]
    assert server.requests == [("/a.png?size=2", f"images.test:{server.port}")]


def test_the_system_resolver_is_asked_once(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    lookups: list[str] = []

    def getaddrinfo(host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        lookups.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    # The suite's guard (tests/conftest.py) resolves localhost only: this test's lookups are
    # its own fake's, so the fetcher's own resolver runs here.
    system_resolve = fetch_module._system_resolve
    monkeypatch.setattr(
        fetch_module, "_system_resolve", getattr(system_resolve, "unguarded", system_resolve)
    )
    server.routes["/a.png"] = reply()

    image = image_fetch(
        url=f"http://images.test:{server.port}/a.png",
        max_bytes=100_000,
        timeout=2.0,
        allow_hosts=ALLOW,
    )

    assert image.data == IMAGE
    assert lookups == ["images.test"]


@pytest.mark.parametrize(
    "location",
    [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://[::ffff:169.254.169.254]/latest/meta-data/",
        "http://metadata.test/computeMetadata/v1/",
        "http://10.0.0.1/",
        "http://intranet.test/admin",
        "http://allowed-private.test/",
        "file:///etc/passwd",
        "ftp://images.test/a.png",
        "gopher://127.0.0.1:{canary}/_",
        "http://127.0.0.1:{canary}/a.png",
        "http://2130706433:{canary}/a.png",
        "//[::1]:{canary}/a.png",
        "http://localhost:{canary}/a.png",
        "http://user@images.test:{server}/a.png",
    ],
)
def test_a_redirect_to_an_internal_address_is_refused(
    location: str,
    server: ScriptedServer,
    canary: ScriptedServer,
    recorder: ConnectRecorder,
    resolver: FakeResolver,
) -> None:
    server.routes["/start"] = redirect(location.format(canary=canary.port, server=server.port))
    server.routes["/a.png"] = reply()

    with pytest.raises(ImageFetchError) as refused:
        fetch(f"http://images.test:{server.port}/start", resolver)

    assert refused.value.transient is False
    assert recorder.attempts == [("127.0.0.1", server.port)]
    assert server.requests == [("/start", f"images.test:{server.port}")]
    assert canary.connections == 0


def test_each_redirect_is_resolved_once_and_judged_again(
    server: ScriptedServer, canary: ScriptedServer, recorder: ConnectRecorder
) -> None:
    resolver = FakeResolver({"rebind.test": lambda call: [PUBLIC] if call == 1 else ["127.0.0.1"]})
    server.routes["/start"] = redirect(f"http://rebind.test:{canary.port}/a.png")
    recorder.expected = {PUBLIC}

    with pytest.raises(ImageFetchError):
        fetch(f"http://images.test:{server.port}/start", resolver)

    assert resolver.calls == ["images.test", "rebind.test"]
    assert recorder.attempts == [("127.0.0.1", server.port), (PUBLIC, canary.port)]
    assert canary.connections == 0


def _hops(server: ScriptedServer, count: int) -> None:
    """/hop/N redirects to /hop/N-1 (a relative Location), and /hop/0 is the image."""
    server.routes["/hop/0"] = reply()
    for number in range(1, count + 1):
        server.routes[f"/hop/{number}"] = redirect(
            str(number - 1), (301, 302, 307, 308)[number % 4]
        )


def test_up_to_three_redirects_are_followed(server: ScriptedServer, resolver: FakeResolver) -> None:
    _hops(server, MAX_REDIRECTS)
    start = f"http://images.test:{server.port}/hop/{MAX_REDIRECTS}"

    image = fetch(start, resolver)

    assert image.url == f"http://images.test:{server.port}/hop/0"
    assert image.data == IMAGE
    assert [path for path, _host in server.requests] == ["/hop/3", "/hop/2", "/hop/1", "/hop/0"]


def test_a_fourth_redirect_is_refused(server: ScriptedServer, resolver: FakeResolver) -> None:
    _hops(server, MAX_REDIRECTS + 1)

    with pytest.raises(ImageFetchError) as refused:
        fetch(f"http://images.test:{server.port}/hop/4", resolver)

    assert refused.value.transient is False
    assert "redirected" in refused.value.reason
    assert "/hop/0" not in [path for path, _host in server.requests]


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_between_allowed_hosts_keeps_each_hosts_name(
    status: int,
    server: ScriptedServer,
    other_server: ScriptedServer,
    resolver: FakeResolver,
) -> None:
    target = f"http://other-images.test:{other_server.port}/b.png"
    server.routes["/a.png"] = redirect(target, status)
    other_server.routes["/b.png"] = reply(content_type="image/webp")

    image = fetch(f"http://images.test:{server.port}/a.png", resolver)

    assert image == FetchedImage(data=IMAGE, content_type="image/webp", url=target)
    assert other_server.requests == [("/b.png", f"other-images.test:{other_server.port}")]


def test_an_announced_length_over_the_cap_is_refused_unread(
    server: ScriptedServer, resolver: FakeResolver
) -> None:
    def huge(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "image/png")
        handler.send_header("Content-Length", str(10**12))
        handler.end_headers()
        handler.wfile.write(IMAGE)
        handler.wfile.flush()
        server.stopping.wait(5)  # a fetcher reading on would wait here for its timeout

    server.routes["/a.png"] = huge

    with pytest.raises(ImageFetchError) as refused:
        fetch(f"http://images.test:{server.port}/a.png", resolver, max_bytes=5000, timeout=3)

    # A fetcher that read on would have met its timeout instead: a transient "in time".
    assert refused.value.transient is False
    assert "larger than 5000 bytes" in refused.value.reason


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_past_the_cap_is_refused(
    chunked: bool, server: ScriptedServer, resolver: FakeResolver
) -> None:
    sent: list[int] = []

    def chunks() -> Iterator[bytes]:
        for _ in range(200):
            sent.append(1000)
            yield b"%x\r\n%s\r\n" % (1000, b"x" * 1000) if chunked else b"x" * 1000
            time.sleep(0.001)

    headers = {"Transfer-Encoding": "chunked"} if chunked else {}
    server.routes["/a.png"] = stream(chunks(), headers=headers)

    with pytest.raises(ImageFetchError) as refused:
        fetch(f"http://images.test:{server.port}/a.png", resolver, max_bytes=5000)

    assert refused.value.transient is False
    assert "larger than 5000 bytes" in refused.value.reason
    time.sleep(0.05)
    assert sum(sent) < 200_000  # the fetcher hung up rather than reading everything


def test_a_body_of_exactly_the_cap_is_fetched(
    server: ScriptedServer, resolver: FakeResolver
) -> None:
    server.routes["/a.png"] = stream(iter([b"y" * 3000, b"y" * 2000]))

    image = fetch(f"http://images.test:{server.port}/a.png", resolver, max_bytes=5000)

    assert image.data == b"y" * 5000


def test_a_body_shorter_than_announced_is_a_transient_failure(
    server: ScriptedServer, resolver: FakeResolver
) -> None:
    server.routes["/a.png"] = stream(iter([IMAGE[:100]]), headers={"Content-Length": "5000"})

    with pytest.raises(ImageFetchError) as failed:
        fetch(f"http://images.test:{server.port}/a.png", resolver)

    assert failed.value.transient is True


def _drip(data: bytes, server: ScriptedServer) -> Route:
    def route(handler: BaseHTTPRequestHandler) -> None:
        for byte in data:
            if server.stopping.wait(0.05):
                return
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()

    return route


@pytest.mark.parametrize("phase", ["headers", "body"])
def test_a_slow_drip_server_is_cut_off_at_the_timeout(
    phase: str, server: ScriptedServer, resolver: FakeResolver
) -> None:
    """A byte every 50 ms: no single read waits as long as the 0.5 s timeout, so only the
    fetch's overall deadline stops it."""
    head = b"HTTP/1.0 200 OK\r\nContent-Type: image/png\r\n"
    if phase == "headers":
        server.routes["/a.png"] = _drip(head + b"X-Padding: " + b"p" * 200, server)
    else:
        body = _drip(IMAGE, server)

        def route(handler: BaseHTTPRequestHandler) -> None:
            handler.wfile.write(head + b"\r\n")
            body(handler)

        server.routes["/a.png"] = route
    started = time.monotonic()

    with pytest.raises(ImageFetchError) as failed:
        fetch(f"http://images.test:{server.port}/a.png", resolver, timeout=0.5)

    # Not before the timeout (a lower bound only: a loaded machine is slower, never faster);
    # that the deadline, not the end of the drip, stopped it, the reason says.
    assert time.monotonic() - started > 0.4
    assert failed.value.transient is True
    assert "in time" in failed.value.reason


def test_a_silent_server_times_out(server: ScriptedServer, resolver: FakeResolver) -> None:
    # Silent until the test ends: only the fetch's timeout can end the wait.
    server.routes["/a.png"] = lambda _handler: server.stopping.wait(60)

    with pytest.raises(ImageFetchError) as failed:
        fetch(f"http://images.test:{server.port}/a.png", resolver, timeout=0.5)

    assert failed.value.transient is True
    assert "in time" in failed.value.reason


@pytest.mark.parametrize(
    "route",
    [
        reply(body=b"<html>hello</html>", content_type="text/html"),
        reply(content_type=None),
        reply(content_type="image/"),
        reply(content_type="application/octet-stream"),
        reply(content_type="image/png, text/html"),
        reply(headers={"Content-Encoding": "gzip"}),
    ],
    ids=["html", "no-type", "empty-subtype", "octet-stream", "two-types", "gzip"],
)
def test_a_body_that_is_not_an_image_is_refused(
    route: Route, server: ScriptedServer, resolver: FakeResolver
) -> None:
    server.routes["/a.png"] = route

    with pytest.raises(ImageFetchError) as refused:
        fetch(f"http://images.test:{server.port}/a.png", resolver)

    assert refused.value.transient is False


@pytest.mark.parametrize(
    ("status", "transient"),
    # The one rule of every outgoing request (mirix_site.providers.http), 409 and 425 included.
    [
        (404, False),
        (403, False),
        (410, False),
        (302, False),
        (408, True),
        (409, True),
        (425, True),
        (429, True),
        (500, True),
        (503, True),
    ],
)
def test_an_error_status_says_whether_to_retry(
    status: int, transient: bool, server: ScriptedServer, resolver: FakeResolver
) -> None:
    server.routes["/a.png"] = reply(status, b"oops", "text/plain")  # a 302 with no Location

    with pytest.raises(ImageFetchError) as failed:
        fetch(f"http://images.test:{server.port}/a.png", resolver)

    assert failed.value.transient is transient
    assert str(status) in failed.value.reason


def test_a_closed_port_is_a_transient_failure(resolver: FakeResolver) -> None:
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]  # bound, not listening: connections are refused

        with pytest.raises(ImageFetchError) as failed:
            fetch(f"http://images.test:{port}/a.png", resolver)

    assert failed.value.transient is True


def _certificate(tmp_path: Path, hostname: str) -> tuple[Path, Path]:
    """A self-signed certificate for ``hostname`` only (no IP address in it), and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(hostname)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    certificate_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    certificate_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return certificate_path, key_path


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[ScriptedServer, Path, list[str]]]:
    """An HTTPS server on loopback with a certificate for images.test, recording the SNI names."""
    certificate, key = _certificate(tmp_path, "images.test")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate, key)
    server_names: list[str] = []
    context.sni_callback = lambda _socket, name, _context: server_names.append(name)
    with served(context) as server:
        server.routes["/a.png"] = reply(content_type="image/gif")
        yield server, certificate, server_names


def test_https_verifies_the_hostname_not_the_address(
    tls_server: tuple[ScriptedServer, Path, list[str]],
    recorder: ConnectRecorder,
    resolver: FakeResolver,
) -> None:
    server, certificate, server_names = tls_server

    image = fetch(f"https://images.test:{server.port}/a.png", resolver, ca_file=str(certificate))

    assert image.content_type == "image/gif"
    assert server_names == ["images.test"]
    assert recorder.attempts == [("127.0.0.1", server.port)]
    assert server.requests == [("/a.png", f"images.test:{server.port}")]


@pytest.mark.parametrize("trusted", [True, False])
def test_https_refuses_a_certificate_for_another_name_or_issuer(
    trusted: bool,
    tls_server: tuple[ScriptedServer, Path, list[str]],
    resolver: FakeResolver,
) -> None:
    server, certificate, server_names = tls_server
    host = "other-images.test" if trusted else "images.test"

    with pytest.raises(ImageFetchError) as refused:
        fetch(
            f"https://{host}:{server.port}/a.png",
            resolver,
            ca_file=str(certificate) if trusted else None,
        )

    assert refused.value.transient is False
    assert "certificate" in refused.value.reason
    assert server_names == [host]
    assert server.requests == []
