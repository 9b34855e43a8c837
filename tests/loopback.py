"""A real HTTP server on loopback that stands in for an external API (LLM or embeddings).

Tests script its answers with ``server.respond(handler)``; it records every request so a test
can assert what the product sent (path, headers, JSON body) and how many calls it made.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass
class Reply:
    status: int = 200
    body: Any = field(default_factory=dict)  # dict/list → JSON; str/bytes → as is
    headers: dict[str, str] = field(default_factory=dict)


Responder = Callable[[RecordedRequest], Reply]


class LoopbackServer:
    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._responder: Responder = lambda _request: Reply(404, {"error": "no responder set"})
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                recorded = RecordedRequest(
                    method=self.command,
                    path=self.path,
                    headers={key.lower(): value for key, value in self.headers.items()},
                    body=self.rfile.read(length) if length else b"",
                )
                with server._lock:
                    server.requests.append(recorded)
                    responder = server._responder
                reply = responder(recorded)
                payload = reply.body
                if isinstance(payload, dict | list):
                    payload = json.dumps(payload).encode()
                elif isinstance(payload, str):
                    payload = payload.encode()
                self.send_response(reply.status)
                headers = {"Content-Type": "application/json", **reply.headers}
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                # The caller may be gone by now (a fault test killed it).
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.end_headers()
                    self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = _handle  # noqa: N815

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def respond(self, responder: Responder) -> None:
        with self._lock:
            self._responder = responder

    def respond_json(self, body: Any, status: int = 200) -> None:
        self.respond(lambda _request: Reply(status, body))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def openai_reply(answer: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat-completions answer whose message is ``answer`` as JSON (a structured
    output), with token usage."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": json.dumps(answer)},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 321, "completion_tokens": 45, "total_tokens": 366},
    }


# --- A loopback LLM that holds a worker in the middle of a job -----------------------------------

_TURN = re.compile(r"^\[(\d+)\] \([^)]*\) [^:]+: (note .*)$", re.MULTILINE)


def one_episode_per_note(request: RecordedRequest) -> dict[str, Any]:
    """What a model would answer: an event for each turn that is a note, citing it."""
    prompt = request.json["messages"][-1]["content"]
    episodes = [
        {"summary": text, "details": "", "actor": "user", "source_message_ids": [int(pk)]}
        for pk, text in _TURN.findall(prompt)
    ]
    empty: dict[str, list[Any]] = {
        kind: [] for kind in ("core", "semantic", "procedural", "resource", "knowledge_vault")
    }
    return {"episodic": episodes, **empty}


class StallingLLM:
    """An LLM that answers at once, except the call after ``stall()``: that one waits for
    ``release()``, which holds the worker making it in the middle of its job (claimed, its turns
    locked, its transaction open). ``stalled`` is set once that call has arrived. Workers
    given ``environment_for(route)`` call it under their own route, and ``stall(route)`` holds
    the next call of that route only (one worker of several)."""

    def __init__(self, server: LoopbackServer) -> None:
        self.server = server
        self.stalled = threading.Event()
        self._released = threading.Event()
        self._armed: str | None = None  # the route whose next call stalls ("": any)
        self._lock = threading.Lock()
        server.respond(self._answer)

    @property
    def environment(self) -> dict[str, str]:
        """The worker's settings that send extraction here."""
        return self.environment_for("")

    def environment_for(self, route: str) -> dict[str, str]:
        return {
            "LLM_PROVIDER": "openai",
            "LLM_MODEL": "loopback",
            "LLM_API_BASE": f"{self.server.url}{'/' + route if route else ''}/v1",
            "LLM_API_KEY": "sk-loopback",
        }

    def stall(self, route: str = "") -> None:
        with self._lock:
            self._armed = route

    def release(self) -> None:
        self._released.set()

    def _answer(self, request: RecordedRequest) -> Reply:
        with self._lock:
            armed = self._armed
            stall = armed is not None and request.path.startswith(f"/{armed}/" if armed else "/")
            if stall:
                self._armed = None
        if stall:
            self.stalled.set()
            self._released.wait(60)
        return Reply(200, openai_reply(one_episode_per_note(request)))


@pytest.fixture
def loopback() -> Iterator[LoopbackServer]:
    server = LoopbackServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
