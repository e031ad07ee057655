"""A fake Mistral API on 127.0.0.1 that the real ``mistralai`` SDK is pointed at with ``server_url=``.

It speaks Mistral's wire format: ``POST /v1/chat/completions`` as JSON, or (``"stream": true``)
as server-sent events whose last chunk (the one with ``finish_reason``) carries ``usage``, the way
Mistral sends it; ``usage=False`` reports none (an empty ``usage`` in a JSON response). It counts
the model requests it received (:meth:`FakeMistral.count`) and records the usage it reported
(:attr:`FakeMistral.reported`).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from typing import Any

from .fake_provider import Reported, _Server, prompt_tokens

__all__ = ["REPLY", "FakeMistral"]

REPLY = "Hello from the fake Mistral, one word per chunk."
PATH = "/v1/chat/completions"


class FakeMistral:
    def __init__(self, *, usage: bool = True) -> None:
        self.usage = usage
        self.reported: list[Reported] = []
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server: _Server | None = None

    def __enter__(self) -> FakeMistral:
        fake = self

        class Handler(_Handler):
            mistral = fake

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
        """``server_url`` for ``Mistral`` (the SDK adds ``/v1/...``)."""
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def count(self) -> int:
        with self._lock:
            return len(self.bodies)

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
    mistral: FakeMistral

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, content_type: str, data: bytes, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path.split("?")[0] != PATH:
            self._send("application/json", json.dumps({"message": f"no route {self.path}"}).encode(), 404)
            return
        body = json.loads(raw or b"{}")
        fake = self.mistral
        with fake._lock:
            fake.bodies.append(body)
        model = str(body.get("model", "mistral-small-latest"))
        base = {"id": "cmpl-mistral", "created": int(time.time()), "model": model}
        if not body.get("stream"):
            message = {"role": "assistant", "content": REPLY}
            payload: dict[str, Any] = {
                **base,
                "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            }
            # the SDK requires ``usage`` here: without usage, an empty one (its fields default to 0)
            payload["usage"] = fake._report(model, body, False) if fake.usage else {}
            self._send("application/json", json.dumps(payload).encode())
            return
        words = REPLY.split(" ")
        chunks: list[dict[str, Any]] = []
        for i, word in enumerate(words):
            last = i == len(words) - 1
            choice = {"index": 0, "delta": {"content": word if last else word + " "}, "finish_reason": None}
            chunk: dict[str, Any] = {**base, "object": "chat.completion.chunk", "choices": [choice]}
            if last:
                choice["finish_reason"] = "stop"
                if fake.usage:
                    chunk["usage"] = fake._report(model, body, True)
            chunks.append(chunk)
        data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        self._send("text/event-stream", data.encode())
