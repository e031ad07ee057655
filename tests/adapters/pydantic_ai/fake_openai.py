"""A small OpenAI chat-completions server on 127.0.0.1 that keeps asking for a tool.

Answers ``POST /v1/chat/completions`` as JSON, or as SSE when the request says ``stream``, with
the ``usage`` OpenAI reports (the streamed one in a last chunk, as with ``include_usage``), and
counts the requests it received. The shared ``tests/support/fake_provider.py`` always answers
with text; an agent loop needs a model that keeps calling a tool, which is all this one does.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PROMPT_TOKENS, COMPLETION_TOKENS = 1_000, 200


class FakeOpenAI:
    def __init__(self, model: str = "gpt-4o") -> None:
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
            number = len(self.requests)
        call = {
            "id": f"call_{number}",
            "type": "function",
            "function": {"name": "weather", "arguments": json.dumps({"city": "Oslo"})},
        }
        return number, call

    def _usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": PROMPT_TOKENS,
            "completion_tokens": COMPLETION_TOKENS,
            "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                number, call = fake._answer(body)
                base = {"id": f"chatcmpl-{number}", "created": 1_700_000_000, "model": fake.model}
                if body.get("stream"):
                    self._sse(base, call)
                    return
                message = {"role": "assistant", "content": None, "tool_calls": [call]}
                payload = {
                    **base,
                    "object": "chat.completion",
                    "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                    "usage": fake._usage(),
                }
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _sse(self, base: dict[str, Any], call: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                delta = {"role": "assistant", "tool_calls": [{"index": 0, **call}]}
                chunks: list[dict[str, Any]] = [
                    {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                    {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
                    {"choices": [], "usage": fake._usage()},
                ]
                for chunk in chunks:
                    event = {**base, "object": "chat.completion.chunk", **chunk}
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        return Handler
