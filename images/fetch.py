"""Downloading what a caller named by URL (an image in a message, a skill an operator imports),
without letting the URL reach this server's network.

A URL in a message is a way to make the server connect somewhere: the cloud metadata service, a
database on loopback, the private network. So each hop is judged by the address it will really
connect to (numeric hosts read as ``inet_aton`` reads them, names resolved once, every answer
public), and the socket is opened to that vetted address, so a DNS answer that changes between
two lookups cannot slip in. TLS and the ``Host`` header keep the URL's hostname. The bytes are
returned undecoded: reading them (as an image, a SKILL.md) is the caller's job. ``FetchKind``
says what is fetched: the word its refusals use, what it asks for, the media types it takes.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import re
import socket
import ssl
import string
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from urllib.parse import quote, urljoin, urlsplit

from mirix_site.providers.http import http_status_transient

__all__ = [
    "IMAGE",
    "FetchKind",
    "Fetched",
    "FetchedImage",
    "ImageFetchError",
    "Resolver",
    "image_fetch",
    "remote_fetch",
    "url_check",
]

MAX_REDIRECTS = 3
READ_CHUNK_BYTES = 64 * 1024
_REQUEST_HEADERS = {"User-Agent": "mirix-site", "Connection": "close"}

# (host, port) -> the addresses the host names; the default asks the system resolver.
Resolver = Callable[[str, int], list[str]]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_DEFAULT_PORTS = {"http": 80, "https": 443}
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Whitespace, control characters and backslashes: browsers and Python's parser disagree on what
# they mean inside a URL (``http://127.0.0.1\@example.com/``), so no reading of them is trusted.
_UNSAFE_URL_CHARACTERS = re.compile(r"[\x00-\x20\x7f\\]")
_NUMBER = re.compile(r"0x[0-9a-f]*|[0-9]+")
_IMAGE_MEDIA_TYPE = re.compile(r"image/[a-z0-9][a-z0-9!#$&^_.+-]*")

# Spelled out rather than left to ``is_global``, whose lists differ between Python releases (3.11
# calls multicast, 6to4 and NAT64 addresses global); ``is_global`` is checked as well.
_REFUSED_IPV4 = (
    ipaddress.IPv4Network("0.0.0.0/8"),  # "this network": 0.0.0.0 reaches loopback on Linux
    ipaddress.IPv4Network("10.0.0.0/8"),
    ipaddress.IPv4Network("100.64.0.0/10"),  # carrier-grade NAT
    ipaddress.IPv4Network("127.0.0.0/8"),
    ipaddress.IPv4Network("169.254.0.0/16"),  # link-local, with the metadata service
    ipaddress.IPv4Network("172.16.0.0/12"),
    ipaddress.IPv4Network("192.0.0.0/24"),  # IETF protocol assignments
    ipaddress.IPv4Network("192.0.2.0/24"),  # documentation, like the two /24s below
    ipaddress.IPv4Network("192.88.99.0/24"),  # the deprecated 6to4 relay anycast
    ipaddress.IPv4Network("192.168.0.0/16"),
    ipaddress.IPv4Network("198.18.0.0/15"),  # benchmarking
    ipaddress.IPv4Network("198.51.100.0/24"),
    ipaddress.IPv4Network("203.0.113.0/24"),
    ipaddress.IPv4Network("224.0.0.0/4"),  # multicast
    ipaddress.IPv4Network("240.0.0.0/4"),  # reserved, with the broadcast 255.255.255.255
)
# Public IPv6 unicast is all inside 2000::/3. Outside it, refused without further thought: ::1,
# ::, the deprecated IPv4-compatible ::/96, ULA fc00::/7, link-local fe80::/10, site-local
# fec0::/10, multicast ff00::/8, and the local-use NAT64 prefix 64:ff9b:1::/48, whose embedding
# depends on a prefix length this server cannot know. Inside it: the IETF protocol assignments
# 2001::/23, with Teredo 2001::/32 (refused outright: its client address is obfuscated, and no
# image host is reachable only through a Teredo tunnel) and benchmarking; then documentation.
_PUBLIC_IPV6 = ipaddress.IPv6Network("2000::/3")
_REFUSED_IPV6 = tuple(map(ipaddress.IPv6Network, ("2001::/23", "2001:db8::/32", "3fff::/20")))
# The well-known NAT64 prefix: a DNS64 resolver answers it for IPv4-only hosts, so it is judged
# by the IPv4 address in its last 32 bits, where the gateway will connect.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_LOOPBACK = (ipaddress.IPv4Network("127.0.0.0/8"), ipaddress.IPv6Network("::1/128"))


@dataclass(frozen=True)
class FetchKind:
    """What is fetched: the word refusals name it by, the ``Accept`` header asking for it, and
    the media types taken (None: any, the caller checks the bytes)."""

    noun: str
    accept: str
    media_type: re.Pattern[str] | None


IMAGE = FetchKind(noun="image", accept="image/*", media_type=_IMAGE_MEDIA_TYPE)


@dataclass(frozen=True)
class Fetched:
    """The undecoded bytes fetched, their media type, and the URL after redirects."""

    data: bytes
    content_type: str
    url: str


FetchedImage = Fetched


class ImageFetchError(Exception):
    """A fetch that produced nothing (of any ``FetchKind``: the name is the images' own).

    ``reason`` is one sentence, safe to show the caller and to store on the message.
    ``transient`` says whether the same fetch may succeed later (a timeout, a dropped
    connection, a 5xx); a refused address, a bad URL, a 4xx, a non-image or an image too large
    will not.
    """

    def __init__(self, reason: str, *, transient: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.transient = transient


@dataclass(frozen=True)
class _Target:
    url: str
    scheme: str
    host: str  # a lowercase ASCII name without its trailing dot, or an address
    port: int
    address: IPAddress | None  # set when the host is numeric
    request_target: str
    addresses: tuple[str, ...] = ()  # where to connect, once vetted

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == _DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"


def _is_public(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        # 6to4 and NAT64 addresses are judged by the IPv4 address they reach. (IPv4-mapped ones
        # were turned into IPv4 by _address_read.)
        if address.sixtofour is not None:
            return _is_public(address.sixtofour)
        if address in _NAT64:
            return _is_public(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        if address not in _PUBLIC_IPV6 or any(address in net for net in _REFUSED_IPV6):
            return False
    elif any(address in network for network in _REFUSED_IPV4):
        return False
    return address.is_global


def _address_read(text: str) -> IPAddress:
    """An address; an IPv4-mapped one as the IPv4 address the kernel would connect to."""
    address = ipaddress.ip_address(text)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _ipv4_number_read(text: str) -> ipaddress.IPv4Address | None:
    """A host as ``inet_aton`` reads it, or None for a name.

    One to four parts, each decimal, octal (a leading 0) or hex (0x), the last filling the
    remaining bytes: ``127.1``, ``0177.0.0.1``, ``0x7f000001`` and ``2130706433`` are all
    127.0.0.1. A host whose last label is a number is numeric, as in the WHATWG URL standard (no
    top-level domain is one), so ``1.2.3.09`` is refused rather than looked up as a name.
    """
    parts = text.split(".")
    if not _NUMBER.fullmatch(parts[-1]):
        return None
    if len(parts) > 4 or not all(_NUMBER.fullmatch(part) for part in parts):
        raise ValueError(text)
    *leading, last = (
        int(part[2:] or "0", 16)
        if part.startswith("0x")
        else int(part, 8 if part[0] == "0" else 10)
        for part in parts
    )
    if any(value > 255 for value in leading) or last >= 256 ** (4 - len(leading)):
        raise ValueError(text)
    return ipaddress.IPv4Address(
        last + sum(value << (8 * (3 - position)) for position, value in enumerate(leading))
    )


def _host_read(hostname: str) -> tuple[str, IPAddress | None]:
    """(the host to resolve or connect to, its address when it is numeric); ValueError if bad."""
    if ":" in hostname:  # urlsplit lets a colon through only inside brackets: an IPv6 literal
        if "%" in hostname:  # a zone id names one of this server's own network interfaces
            raise ValueError(hostname)
        address = _address_read(hostname)
        return str(address), address
    # IDNA first: it folds full-width digits and ideographic full stops to ASCII, so a host
    # written in them is read as the address it spells.
    name = hostname.encode("idna").decode("ascii").lower().removesuffix(".")
    ipv4 = _ipv4_number_read(name)
    return (str(ipv4), ipv4) if ipv4 is not None else (name, None)


def _target_read(url: str, kind: FetchKind = IMAGE) -> _Target:
    """The hop ``url`` describes, or ImageFetchError for a URL refused from its text alone."""
    noun = kind.noun
    if _UNSAFE_URL_CHARACTERS.search(url):
        raise ImageFetchError(f"The {noun} URL contains spaces, control characters or backslashes.")
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        port = parts.port
    except ValueError:
        raise ImageFetchError(f"The {noun} URL is not a valid URL.") from None
    if scheme not in _DEFAULT_PORTS:
        raise ImageFetchError(f"Only http:// and https:// {noun} URLs are fetched.")
    if "@" in parts.netloc:
        raise ImageFetchError(f"{noun.capitalize()} URLs with credentials (user@host) are refused.")
    if not parts.hostname:
        raise ImageFetchError(f"The {noun} URL has no host.")
    if port == 0:
        raise ImageFetchError(f"The {noun} URL's port is not valid.")
    try:
        host, address = _host_read(parts.hostname)
    except ValueError:
        raise ImageFetchError(f"The {noun} URL's host is not a valid name or address.") from None
    if address is not None and not _is_public(address):
        raise ImageFetchError(f"The {noun} URL's host {host} is not a public internet address.")
    # Non-ASCII characters in the path go out percent-encoded, as browsers send them.
    path = quote(parts.path or "/", safe=string.punctuation)
    query = quote(parts.query, safe=string.punctuation)
    return _Target(
        url=url,
        scheme=scheme,
        host=host,
        port=port or _DEFAULT_PORTS[scheme],
        address=address,
        request_target=f"{path}?{query}" if query else path,
    )


def url_check(*, url: str) -> str | None:
    """Why ``url`` would be refused, judged from its text alone (for a 422), or None.

    Scheme, credentials, a malformed host or port, a numeric host that is not public in any
    spelling. No DNS: a name resolving to an internal address is refused by ``image_fetch``.
    """
    try:
        _target_read(url)
    except ImageFetchError as error:
        return error.reason
    return None


def _system_resolve(host: str, port: int) -> list[str]:
    answers = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(answer[4][0]) for answer in answers))


def _target_vet(
    *, target: _Target, allow_hosts: frozenset[str], resolver: Resolver, kind: FetchKind = IMAGE
) -> _Target:
    """``target`` with the addresses it may connect to, from a single lookup; all must pass."""
    if target.address is not None:
        return replace(target, addresses=(str(target.address),))
    # One reason for a name that does not resolve and one that resolves to a private address,
    # never naming the address: either distinction would let callers map this network's
    # internal DNS through the error messages.
    reason = f"The {kind.noun} host {target.host} does not resolve to a public internet address."
    try:
        answers = resolver(target.host, target.port)
    except (OSError, UnicodeError) as error:
        raise ImageFetchError(
            reason, transient=getattr(error, "errno", None) == socket.EAI_AGAIN
        ) from None
    refused = ImageFetchError(reason)
    if not answers:
        raise refused
    addresses = []
    for answer in answers:
        try:
            address = _address_read(answer)
        except ValueError:
            raise refused from None
        loopback_allowed = target.host in allow_hosts and any(
            address in network for network in _LOOPBACK
        )
        if not (loopback_allowed or _is_public(address)):
            raise refused
        addresses.append(str(address))
    return replace(target, addresses=tuple(addresses))


def _connect(address: str, port: int, timeout: float) -> socket.socket:
    """The one place a socket is opened: to a vetted address, never a name (so no lookup)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect((address, port))
    except BaseException:
        sock.close()
        raise
    return sock


class _Deadline:
    """The whole fetch's time limit, redirects included.

    Socket timeouts bound each wait, but a server dripping a byte just inside them could hold a
    worker for hours. When the limit passes, a timer shuts the open connection down, which wakes
    whatever read is blocked on it; the fetch then reports the timeout.
    """

    def __init__(self, seconds: float) -> None:
        self.ends_at = time.monotonic() + seconds
        self.passed = False
        self._lock = threading.Lock()
        self._watched: socket.socket | None = None
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def remaining(self) -> float:
        return max(0.001, self.ends_at - time.monotonic())

    def watch(self, sock: socket.socket | None) -> None:
        """Shut ``sock`` down when the time is up (None: nothing to watch any more)."""
        with self._lock:
            if self._watched is not None:
                self._watched.close()
            # A duplicate descriptor, because wrapping for TLS detaches the original; shutdown()
            # acts on the connection, whichever descriptor names it.
            self._watched = sock.dup() if sock is not None else None
        if self.passed:
            self._expire()

    def _expire(self) -> None:
        with self._lock:
            self.passed = True
            if self._watched is not None:
                with contextlib.suppress(OSError):
                    self._watched.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._timer.cancel()
        self.watch(None)


class _VettedConnection(http.client.HTTPConnection):
    """HTTP or HTTPS to the URL's host, with its socket opened to an address vetted before."""

    def __init__(self, target: _Target, deadline: _Deadline, ca_file: str | None) -> None:
        super().__init__(target.host, target.port, timeout=deadline.remaining())
        self.tls = target.scheme == "https"
        self.addresses = target.addresses
        self.deadline = deadline
        self.ca_file = ca_file

    def connect(self) -> None:
        # The first address, in the order the resolver prefers (RFC 6724: IPv4 first on a
        # machine without an IPv6 route); every one of them was vetted.
        sock = _connect(self.addresses[0], self.port, self.deadline.remaining())
        self.deadline.watch(sock)
        self.sock = sock  # closed by close() even if the TLS handshake fails
        if self.tls:
            # The server name (SNI) and the certificate's check are the URL's host, not the
            # address connected to.
            context = ssl.create_default_context(cafile=self.ca_file)
            self.sock = context.wrap_socket(sock, server_hostname=self.host)


def _body_read(
    response: http.client.HTTPResponse, *, max_bytes: int, kind: FetchKind = IMAGE
) -> bytes:
    declared = (response.getheader("Content-Length") or "").strip()
    too_big = ImageFetchError(f"The {kind.noun} is larger than {max_bytes} bytes.")
    if declared.isdigit() and int(declared) > max_bytes:
        raise too_big
    received = bytearray()
    # read1 waits for one read of the socket at most, so the cap is checked as bytes arrive.
    while chunk := response.read1(min(READ_CHUNK_BYTES, max_bytes + 1 - len(received))):
        received += chunk
        if len(received) > max_bytes:
            raise too_big
    if declared.isdigit() and len(received) != int(declared):
        raise http.client.IncompleteRead(bytes(received))
    return bytes(received)


def _hop_fetch(
    *, target: _Target, deadline: _Deadline, max_bytes: int, ca_file: str | None, kind: FetchKind
) -> Fetched | str:
    """What ``target`` serves, or the URL it redirects to."""
    noun = kind.noun
    connection = _VettedConnection(target, deadline, ca_file)
    headers = {
        "Host": target.host_header,
        "Accept": kind.accept,
        "Accept-Encoding": "identity",
        **_REQUEST_HEADERS,
    }
    try:
        connection.request("GET", target.request_target, headers=headers)
        response = connection.getresponse()
        status = response.status
        if status in _REDIRECT_STATUSES and response.getheader("Location"):
            return urljoin(target.url, response.getheader("Location", ""))
        if status != 200:
            raise ImageFetchError(
                f"The {noun} host {target.host} answered HTTP {status}.",
                transient=http_status_transient(status),
            )
        media_type = (response.getheader("Content-Type") or "").split(";")[0].strip().lower()
        if kind.media_type is not None and not kind.media_type.fullmatch(media_type):
            raise ImageFetchError(
                f"The URL is not an {noun} (its type is {media_type or 'unset'})."
            )
        if (response.getheader("Content-Encoding") or "identity").strip().lower() != "identity":
            raise ImageFetchError(f"The {noun} host sent a compressed body, which is not accepted.")
        data = _body_read(response, max_bytes=max_bytes, kind=kind)
        if deadline.passed:  # the timer's shutdown reads as the end of a body without a length
            raise TimeoutError
        return Fetched(data=data, content_type=media_type, url=target.url)
    except ssl.SSLCertVerificationError:
        raise ImageFetchError(f"The certificate of {target.host} could not be verified.") from None
    except (OSError, http.client.HTTPException) as error:
        if deadline.passed or isinstance(error, TimeoutError):
            raise ImageFetchError(
                f"The {noun} host did not answer in time.", transient=True
            ) from None
        if isinstance(error, OSError | http.client.IncompleteRead):
            raise ImageFetchError(
                f"The connection to the {noun} host {target.host} failed.", transient=True
            ) from None
        raise ImageFetchError(f"The {noun} host {target.host} did not answer in HTTP.") from None
    finally:
        connection.close()


def remote_fetch(
    *,
    url: str,
    kind: FetchKind,
    max_bytes: int,
    timeout: float,
    allow_hosts: Iterable[str] = (),
    resolver: Resolver | None = None,
    ca_file: str | None = None,
) -> Fetched:
    """What ``url`` serves, a ``kind`` of thing, following at most ``MAX_REDIRECTS`` redirects,
    each judged again.

    ``timeout`` bounds the whole fetch in seconds, redirects included. A name in ``allow_hosts``
    (the setting ``IMAGE_FETCH_ALLOW_HOSTS``, empty in production) may resolve to loopback, and
    only to loopback: it lets tests serve files from this machine. ``resolver`` replaces the
    system's DNS (tests), ``ca_file`` its trusted certificates. Raises ImageFetchError.
    """
    allowed = frozenset(host.lower().removesuffix(".") for host in allow_hosts)
    deadline = _Deadline(timeout)
    try:
        for _hop in range(MAX_REDIRECTS + 1):
            target = _target_vet(
                target=_target_read(url, kind),
                allow_hosts=allowed,
                resolver=resolver or _system_resolve,
                kind=kind,
            )
            outcome = _hop_fetch(
                target=target, deadline=deadline, max_bytes=max_bytes, ca_file=ca_file, kind=kind
            )
            if isinstance(outcome, Fetched):
                return outcome
            url = outcome
        raise ImageFetchError(f"The {kind.noun} URL redirected more than {MAX_REDIRECTS} times.")
    finally:
        deadline.close()


def image_fetch(
    *,
    url: str,
    max_bytes: int,
    timeout: float,
    allow_hosts: Iterable[str] = (),
    resolver: Resolver | None = None,
    ca_file: str | None = None,
) -> Fetched:
    """The image at ``url`` (``remote_fetch`` of an ``IMAGE``)."""
    return remote_fetch(
        url=url,
        kind=IMAGE,
        max_bytes=max_bytes,
        timeout=timeout,
        allow_hosts=allow_hosts,
        resolver=resolver,
        ca_file=ca_file,
    )
