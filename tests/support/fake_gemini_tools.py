"""A fake Gemini endpoint on 127.0.0.1 whose model asks for a function call on every turn.

It answers ``POST /v1beta/models/<model>:generateContent`` (JSON) and ``:streamGenerateContent``
(server-sent events, one chunk) with a ``functionCall`` part for ``function`` (``parallel`` of
them per turn), with usage, so google-genai's automatic function calling never ends by itself. It
counts the requests it received; the test's tool bodies count their own runs.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["FakeGeminiTools"]


class FakeGeminiTools:
    def __init__(self, function: str = "lookup", *, args: dict[str, Any] | None = None, parallel: int = 1):
        self.function = function
        self.args = {"q": "x"} if args is None else args
        self.parallel = parallel
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    def payload(self, model: str) -> dict[str, Any]:
        call = {"functionCall": {"name": self.function, "args": self.args}}
        candidate = {"content": {"role": "model", "parts": [call] * self.parallel}, "finishReason": "STOP"}
        usage = {"promptTokenCount": 20, "candidatesTokenCount": 5, "totalTokenCount": 25}
        return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": model}

    def __enter__(self) -> FakeGeminiTools:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


def _handler(fake: FakeGeminiTools) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            path = self.path.split("?", 1)[0]
            route = re.fullmatch(r"/v1(?:beta)?/models/([^:]+):(generateContent|streamGenerateContent)", path)
            if route is None:
                self.send_error(404)
                return
            with fake._lock:
                fake.requests.append(body)
            payload = json.dumps(fake.payload(route.group(1))).encode()
            if route.group(2) == "streamGenerateContent":
                data = b"data: " + payload + b"\r\n\r\n"
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler
