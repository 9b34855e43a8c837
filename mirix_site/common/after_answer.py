"""Work a request does once its answer has gone out: a record the client does not wait for (the
retrieval log). ``after_answer(work)`` inside a request served through ``AfterAnswerMiddleware``
runs ``work`` when the WSGI server closes the response, which it does after sending the body;
anywhere else (a task, a command, a service called directly) it runs ``work`` at once.

A request served inside another (a tool call of ``/mcp``, handed to the API's views in process)
adds its work to the outer request's: it runs when the outer answer has gone out.

The work runs on the request's thread, after its body, before the connection reads its next
request: an answer is not delayed by it, a client that sends its next request on the same
connection without a pause still waits for it. Its failures are logged, never raised (the
answer is gone).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar

from django.http import HttpRequest, HttpResponseBase

__all__ = ["AfterAnswerMiddleware", "after_answer"]

logger = logging.getLogger(__name__)

_pending: ContextVar[list[Callable[[], None]] | None] = ContextVar("after_answer", default=None)


def after_answer(work: Callable[[], None]) -> None:
    """Run ``work`` once the current request's answer is sent (now outside a request)."""
    pending = _pending.get()
    if pending is None:
        work()
    else:
        pending.append(work)


def _run(works: list[Callable[[], None]]) -> None:
    for work in works:
        try:
            work()
        except Exception:
            logger.exception("work after the answer failed")


class AfterAnswerMiddleware:
    """First in ``MIDDLEWARE``: the work waits for every other middleware's part of the answer."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if _pending.get() is not None:  # served inside another request: its work is the outer's
            return self.get_response(request)
        works: list[Callable[[], None]] = []
        token = _pending.set(works)
        try:
            response = self.get_response(request)
        except BaseException:
            _pending.reset(token)
            _run(works)
            raise
        _pending.reset(token)
        if works:
            # Django closes a response's resources in close(), which the WSGI server (and the
            # test client) calls once the body is sent; FileResponse closes its file the same way.
            response._resource_closers.append(lambda: _run(works))
        return response
