"""A fake Amazon Bedrock runtime on 127.0.0.1 that boto3's ``bedrock-runtime`` client is pointed
at with ``endpoint_url=`` (and dummy credentials).

It answers ``POST /model/<modelId>/converse`` with a Converse response whose ``usage`` holds the
tokens it reports (``usage=False``: none), counts the model requests it received
(:meth:`FakeBedrock.count`) and records the usage it reported (:attr:`FakeBedrock.reported`).
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from typing import Any
from urllib.parse import unquote

from .fake_provider import Reported, _Server, prompt_tokens

__all__ = ["REPLY", "FakeBedrock"]

REPLY = "Hello from the fake Bedrock runtime."


class FakeBedrock:
    def __init__(self, *, usage: bool = True) -> None:
        self.usage = usage
        self.reported: list[Reported] = []
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server: _Server | None = None

    def __enter__(self) -> FakeBedrock:
        fake = self

        class Handler(_Handler):
            bedrock = fake

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
        """``endpoint_url`` for ``boto3.client("bedrock-runtime")``."""
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def count(self) -> int:
        with self._lock:
            return len(self.bodies)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    bedrock: FakeBedrock

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        match = re.fullmatch(r"/model/([^/]+)/converse", self.path.split("?")[0])
        if match is None:
            self._send(404, {"message": f"no route {self.path}"})
            return
        body = json.loads(raw or b"{}")
        fake = self.bedrock
        model = unquote(match.group(1))
        with fake._lock:
            fake.bodies.append(body)
        payload: dict[str, Any] = {
            "output": {"message": {"role": "assistant", "content": [{"text": REPLY}]}},
            "stopReason": "end_turn",
            "metrics": {"latencyMs": 1},
        }
        if fake.usage:
            tokens_in, tokens_out = prompt_tokens(body), len(REPLY.split())
            with fake._lock:
                fake.reported.append(Reported(self.path, model, tokens_in, tokens_out, False))
            payload["usage"] = {
                "inputTokens": tokens_in,
                "outputTokens": tokens_out,
                "totalTokens": tokens_in + tokens_out,
            }
        self._send(200, payload)
