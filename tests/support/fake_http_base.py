"""The skeleton the single-provider fake servers share (fake_groq, fake_mistral, fake_bedrock).

A :class:`FakeHTTPServer` runs ``http.server`` on a thread on 127.0.0.1 (a random port) while it
is used as a context manager, records the body of every model request it received
(:attr:`~FakeHTTPServer.bodies`, :meth:`~FakeHTTPServer.count`) and the usage it reported
(:attr:`~FakeHTTPServer.reported`), and answers the next requests with an error status on demand
(:meth:`~FakeHTTPServer.fail_next`). A subclass implements :meth:`~FakeHTTPServer.handle` for its
wire format, answering through the :class:`Handler`'s ``send_json`` / ``send_bytes`` / ``send_sse``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from typing import Any, TypeVar

from .fake_provider import Reported, _Server, prompt_tokens

__all__ = ["FakeHTTPServer", "Handler"]

_Fake = TypeVar("_Fake", bound="FakeHTTPServer")


class FakeHTTPServer:
    def __init__(self, *, usage: bool = True) -> None:
        self.usage = usage  # False: the server reports no token usage
        self.reported: list[Reported] = []
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._failures: list[int] = []
        self._server: _Server | None = None

    def __enter__(self: _Fake) -> _Fake:
        fake = self

        class Bound(Handler):
            server_fake = fake

        self._server = _Server(("127.0.0.1", 0), Bound)
        threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True).start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        """The server's root URL (the SDK's ``base_url`` / ``server_url`` / ``endpoint_url``)."""
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def count(self) -> int:
        """Model requests received, failures included."""
        with self._lock:
            return len(self.bodies)

    def fail_next(self, count: int = 1, status: int = 429) -> None:
        """Answer the next ``count`` model requests with ``status``."""
        with self._lock:
            self._failures.extend([status] * count)

    def admit(self, body: dict[str, Any]) -> int:
        """Record one model request; the status to answer it with (200, or a queued failure)."""
        with self._lock:
            self.bodies.append(body)
            return self._failures.pop(0) if self._failures else 200

    def report(self, path: str, model: str, body: dict[str, Any], tokens_out: int, streamed: bool) -> int:
        """Record the usage reported for ``body``; returns its input tokens (prompt characters / 4)."""
        tokens_in = prompt_tokens(body)
        with self._lock:
            self.reported.append(Reported(path, model, tokens_in, tokens_out, streamed))
        return tokens_in

    def handle(self, request: Handler, path: str, raw: bytes) -> None:
        """Answer one POST to ``path`` (query string removed) whose body is ``raw``."""
        raise NotImplementedError


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_fake: FakeHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def send_bytes(
        self, content_type: str, data: bytes, status: int = 200, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self.send_bytes("application/json", json.dumps(payload).encode(), status, headers)

    def send_sse(self, chunks: list[dict[str, Any]]) -> None:
        """Server-sent events, one ``data:`` per chunk and a final ``[DONE]``, sent at once."""
        data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        self.send_bytes("text/event-stream", data.encode())

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.server_fake.handle(self, self.path.split("?")[0], raw)
