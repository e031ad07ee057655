"""A fake Groq API on 127.0.0.1 that the real ``groq`` SDK is pointed at with ``base_url=``.

It speaks Groq's wire format: ``POST /openai/v1/chat/completions`` as JSON, or (``stream=True``)
as server-sent events whose last chunk carries the usage in ``x_groq.usage`` the way Groq sends it
(or in ``usage`` when ``stream_options.include_usage`` asks for it); ``usage=False`` reports none.
It counts the model requests it received (:meth:`FakeGroq.count`), records the usage it reported
(:attr:`FakeGroq.reported`) and answers the next requests with 429/500 on demand
(:meth:`FakeGroq.fail_next`, with ``retry-after-ms: 1``).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from typing import Any

from .fake_provider import Reported, _Server, prompt_tokens

__all__ = ["REPLY", "FakeGroq"]

REPLY = "Hello from the fake Groq, one word per chunk."
PATH = "/openai/v1/chat/completions"


class FakeGroq:
    def __init__(self, *, usage: bool = True) -> None:
        self.usage = usage
        self.reported: list[Reported] = []
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._failures: list[int] = []
        self._server: _Server | None = None

    def __enter__(self) -> FakeGroq:
        fake = self

        class Handler(_Handler):
            groq = fake

        self._server = _Server(("127.0.0.1", 0), Handler)
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
        """``base_url`` for ``groq.Groq`` (the SDK adds ``/openai/v1``)."""
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def count(self) -> int:
        """Model requests received, failures included."""
        with self._lock:
            return len(self.bodies)

    def fail_next(self, count: int = 1, status: int = 429) -> None:
        with self._lock:
            self._failures.extend([status] * count)

    def _admit(self, body: dict[str, Any]) -> int:
        with self._lock:
            self.bodies.append(body)
            return self._failures.pop(0) if self._failures else 200

    def _report(self, model: str, body: dict[str, Any], streamed: bool) -> dict[str, int]:
        tokens_in, tokens_out = prompt_tokens(body), len(REPLY.split())
        with self._lock:
            self.reported.append(Reported(PATH, model, tokens_in, tokens_out, streamed))
        return {
            "prompt_tokens": tokens_in,
            "completion_tokens": tokens_out,
            "total_tokens": tokens_in + tokens_out,
        }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    groq: FakeGroq

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path.split("?")[0] != PATH:
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        body = json.loads(raw or b"{}")
        status = self.groq._admit(body)
        if status != 200:
            error = {"error": {"message": "fake Groq failure", "type": "rate_limit_exceeded"}}
            self._json(status, error, {"retry-after-ms": "1", "x-should-retry": "true"})
            return
        model = str(body.get("model", "llama-3.3-70b-versatile"))
        base = {"id": "chatcmpl-groq", "created": int(time.time()), "model": model}
        if not body.get("stream"):
            message = {"role": "assistant", "content": REPLY}
            choice = {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
            payload: dict[str, Any] = {**base, "object": "chat.completion", "choices": [choice]}
            if self.groq.usage:
                payload["usage"] = self.groq._report(model, body, False)
            self._json(200, payload)
            return
        chunks: list[dict[str, Any]] = []
        words = REPLY.split(" ")
        for i, word in enumerate(words):
            delta = {"content": word if i == len(words) - 1 else word + " "}
            chunks.append(
                {**base, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
            )
        last: dict[str, Any] = {**base, "object": "chat.completion.chunk", "choices": []}
        if self.groq.usage:
            usage = self.groq._report(model, body, True)
            if (body.get("stream_options") or {}).get("include_usage"):
                last["usage"] = usage
            else:
                last["x_groq"] = {"id": "req_fake", "usage": usage}
        chunks.append(last)
        data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(data.encode())))  # the whole stream at once
        self.end_headers()
        self.wfile.write(data.encode())
