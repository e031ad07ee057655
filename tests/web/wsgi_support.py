"""Shared pieces of the WSGI and Django tests: a real threaded werkzeug server on 127.0.0.1, a raw
HTTP client, an outer WSGI layer that records what happened around the middleware, and a tiny
budget pool implementing veronica-mw's own admission interface (a test double of OUR protocol;
no framework is faked)."""

from __future__ import annotations

import http.client
import json
import socket
import struct
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from veronica_mw import ExecutionContext, SharedTimeoutPool, get_current_execution_context

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

HANG_GUARD_S = 10.0


class QuietHandler(WSGIRequestHandler):
    """werkzeug's handler without the per-request access log line."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


@contextmanager
def serve(app: WSGIApplication, *, threaded: bool = True) -> Iterator[BaseWSGIServer]:
    """Run ``app`` on a real werkzeug server bound to an ephemeral port of 127.0.0.1."""
    server = make_server("127.0.0.1", 0, app, threaded=threaded, request_handler=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(HANG_GUARD_S)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def get(server: BaseWSGIServer, path: str, headers: dict[str, str] | None = None) -> Reply:
    """One real HTTP/1.1 GET over a socket."""
    conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=HANG_GUARD_S)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        body = response.read()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, body)
    finally:
        conn.close()


def read_until(sock: socket.socket, marker: bytes) -> bytes:
    data = b""
    while marker not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def drop_connection(sock: socket.socket) -> None:
    """Close with SO_LINGER 0: the peer gets a RST, so the server's next write fails at once."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def open_stream(server: BaseWSGIServer, path: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.server_port), timeout=HANG_GUARD_S)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    return sock


def timers() -> int:
    """Armed context deadlines: a context that was properly ended has cancelled its timer."""
    return len(SharedTimeoutPool.default())


@dataclass
class Probe:
    """An outer WSGI layer around the middleware: records the current context when a request
    arrives and signals when the server has closed the response (so the middleware is done)."""

    app: WSGIApplication
    seen_on_entry: list[ExecutionContext | None] = field(default_factory=list)
    closed: threading.Event = field(default_factory=threading.Event)
    close_calls: int = 0

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        self.seen_on_entry.append(get_current_execution_context())
        self.closed.clear()
        return _ProbeBody(self, self.app(environ, start_response))


class _ProbeBody:
    def __init__(self, probe: Probe, inner: Iterable[bytes]) -> None:
        self._probe = probe
        self._inner = inner
        self._it = iter(inner)

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        return next(self._it)

    def close(self) -> None:
        try:
            close = getattr(self._inner, "close", None)
            if close is not None:
                close()
        finally:
            self._probe.close_calls += 1
            self._probe.closed.set()


class CountingIterable:
    """A plain WSGI body that counts its close() calls and records the context on each chunk."""

    def __init__(self, chunks: Iterable[bytes], on_chunk: Callable[[], object] | None = None) -> None:
        self._chunks = iter(chunks)
        self._on_chunk = on_chunk
        self.close_calls = 0
        self.contexts: list[ExecutionContext | None] = []
        self.context_on_close: ExecutionContext | None = None

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        self.contexts.append(get_current_execution_context())
        if self._on_chunk is not None:
            self._on_chunk()
        return next(self._chunks)

    def close(self) -> None:
        self.close_calls += 1
        self.context_on_close = get_current_execution_context()


@dataclass
class Ledger:
    """A parent budget (the kernel's BudgetParent protocol) with a fixed amount left."""

    left_usd: float
    retry_after: float | None = None
    settled: list[tuple[float, float]] = field(default_factory=list)

    def reserve(self, amount_usd: float) -> bool:
        if amount_usd > self.left_usd:
            return False
        self.left_usd -= amount_usd
        return True

    def settle(self, reserved_usd: float, actual_usd: float) -> None:
        self.left_usd += reserved_usd - actual_usd
        self.settled.append((reserved_usd, actual_usd))

    def retry_after_s(self) -> float | None:
        return self.retry_after


@dataclass
class Admission:
    allowed: bool
    status: int = 429
    reason: str = "budget_exceeded"
    retry_after_s: float | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    ledger: Ledger | None = None


@dataclass
class FakePool:
    """Answers every admit() with ``answer`` (or raises ``error``) and records what it was asked."""

    answer: Admission
    error: Exception | None = None
    asked: list[dict[str, Any]] = field(default_factory=list)

    def admit(self, environ: dict[str, Any]) -> Admission:
        self.asked.append(environ)
        if self.error is not None:
            raise self.error
        return self.answer


def start_recorder() -> tuple[list[tuple[str, list[tuple[str, str]], Any]], StartResponse]:
    """A start_response for calling a WSGI app directly that records every call."""
    calls: list[tuple[str, list[tuple[str, str]], Any]] = []

    def start_response(
        status: str, headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Callable[[bytes], object]:
        calls.append((status, headers, exc_info))
        return lambda data: None

    return calls, start_response


def call_direct(app: WSGIApplication, environ: WSGIEnvironment) -> tuple[list[tuple[str, Any, Any]], bytes]:
    """Call a WSGI app like a server does: iterate fully, then close."""
    calls, start_response = start_recorder()
    result = app(environ, start_response)
    try:
        body = b"".join(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    return calls, body


def environ_for(path: str = "/", **extra: Any) -> dict[str, Any]:
    from werkzeug.test import EnvironBuilder

    environ = EnvironBuilder(path=path).get_environ()
    environ.update(extra)
    return environ
