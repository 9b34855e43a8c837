"""The web server's own refusals in the API's one error shape.

gunicorn answers what never reaches Django itself — a request line longer than it reads
(414), header fields too large (431), a request it cannot parse (400) — with an HTML page.
``JsonErrorWorker`` is gunicorn's threaded worker whose error pages are ``{"detail",
"code"}`` JSON, like every answer of the API (``mirix_site.api.errors``). ``make run`` starts
gunicorn with it (``mirix_site.launcher``); a deployment of its own passes
``--worker-class mirix_site.webserver.JsonErrorWorker``.
"""

from __future__ import annotations

import json
import socket

from gunicorn import util
from gunicorn.workers.gthread import ThreadWorker

_CODES = {
    400: ("The request could not be read as HTTP.", "bad_request"),
    403: ("The request is forbidden.", "permission_denied"),
    414: (
        "The request line (the URL with its query string) is longer than the server reads.",
        "uri_too_long",
    ),
    417: ("The request's Expect header cannot be met.", "expectation_failed"),
    431: ("The request's header fields are larger than the server reads.", "headers_too_large"),
    500: ("The server failed; try again.", "server_error"),
    501: ("The request's transfer coding is not supported.", "not_implemented"),
}


def json_error_write(sock: socket.socket, status_int: int, reason: str, mesg: str) -> None:
    """gunicorn's ``util.write_error`` with the API's error body (``mesg``, gunicorn's own
    detail, is left out: it may echo what the request sent)."""
    detail, code = _CODES.get(status_int, (reason, "error"))
    body = json.dumps({"detail": detail, "code": code}).encode()
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\n"
        "Connection: close\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode("latin1")
    util.write_nonblock(sock, head + body)


class JsonErrorWorker(ThreadWorker):
    """gunicorn's ``gthread`` worker, its error pages in JSON."""

    def init_process(self) -> None:
        # The worker process serves this application alone: its error writer is ours.
        util.write_error = json_error_write
        super().init_process()
