"""A minimal OpenAI-compatible chat-completions server on 127.0.0.1 for the replay tests.

``POST /v1/chat/completions`` answers deterministically: the last user message, upper-cased when the
model name contains "shout" (so a replay can differ from the original), with token usage counted
in words. Every request body is kept, in order, for the tests to assert on. A model named
``fail-*`` gets an HTTP 500.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def answer(model: str, messages: list[dict[str, Any]]) -> str:
    last = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
    return str(last).upper() if "shout" in model else f"echo: {last}"


def completion(model: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    text = answer(model, messages)
    prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages)
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(text.split())},
    }


class FakeChatServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.headers_seen: list[dict[str, str]] = []
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: FakeChatServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        if self.path != "/v1/chat/completions":
            self._reply(404, {"error": {"message": f"no route {self.path}"}})
            return
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        with self.server.lock:
            self.server.requests.append(body)
            self.server.headers_seen.append({k.lower(): v for k, v in self.headers.items()})
        if str(body.get("model", "")).startswith("fail-"):
            self._reply(500, {"error": {"message": "upstream exploded"}})
            return
        self._reply(200, completion(body["model"], body["messages"]))

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def fake_chat_server() -> Iterator[FakeChatServer]:
    server = FakeChatServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(30)
