"""A fake model provider on 127.0.0.1 whose answers are tool calls (and several choices).

Real provider SDKs are pointed at it with ``base_url=``; each answer carries ``payload`` (a string
such as a leaked secret) where an output check has to find it:

- OpenAI chat completions ``POST /v1/chat/completions``: with ``tools`` in the request, one
  ``tool_calls`` entry whose JSON arguments hold the payload; with ``n`` = 2 and no tools, two
  choices, the second one's text holding it;
- OpenAI Responses ``POST /v1/responses``: one ``function_call`` output item;
- Anthropic messages ``POST /v1/messages``: a text block and a ``tool_use`` block;
- Google Gemini ``POST /v1beta/models/<model>:generateContent``: one ``functionCall`` part.

Every answer has token usage; :attr:`FakeToolProvider.paths` lists the requests received.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["FakeToolProvider"]

TOOL = "send_email"


class FakeToolProvider:
    def __init__(self, payload: str) -> None:
        self.payload = payload
        self.paths: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeToolProvider:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def arguments(self) -> dict[str, Any]:
        return {"to": "ops@example.com", "body": f"the key is {self.payload}"}

    def answer(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.paths.append(path)
        model = str(body.get("model", ""))
        if path == "/v1/chat/completions":
            return self._chat(model, body)
        if path == "/v1/responses":
            return self._responses(model)
        if path.startswith("/v1/messages"):
            return self._anthropic(model)
        return self._gemini(model)

    def _chat(self, model: str, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("tools"):
            call = {
                "id": "call_1",
                "type": "function",
                "function": {"name": TOOL, "arguments": json.dumps(self.arguments())},
            }
            messages = [{"role": "assistant", "content": None, "tool_calls": [call], "refusal": None}]
        else:
            texts = ["nothing to see", f"here it is: {self.payload}"][: int(body.get("n") or 1)]
            messages = [{"role": "assistant", "content": t, "refusal": None} for t in texts]
        choices = [
            {"index": i, "message": m, "finish_reason": "tool_calls" if body.get("tools") else "stop"}
            for i, m in enumerate(messages)
        ]
        return {
            "id": "chatcmpl-tools",
            "object": "chat.completion",
            "created": 1,
            "model": model,
            "choices": choices,
            "usage": {"prompt_tokens": 12, "completion_tokens": 20, "total_tokens": 32},
        }

    def _responses(self, model: str) -> dict[str, Any]:
        item = {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": TOOL,
            "arguments": json.dumps(self.arguments()),
            "status": "completed",
        }
        return {
            "id": "resp_tools",
            "object": "response",
            "created_at": 1,
            "status": "completed",
            "model": model,
            "output": [item],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": 12,
                "output_tokens": 20,
                "total_tokens": 32,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }

    def _anthropic(self, model: str) -> dict[str, Any]:
        return {
            "id": "msg_tools",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [
                {"type": "text", "text": "Sending it now."},
                {"type": "tool_use", "id": "toolu_1", "name": TOOL, "input": self.arguments()},
            ],
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 12, "output_tokens": 20},
        }

    def _gemini(self, model: str) -> dict[str, Any]:
        part = {"functionCall": {"name": TOOL, "args": self.arguments()}}
        return {
            "candidates": [
                {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
            ],
            "modelVersion": model,
            "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 20, "totalTokenCount": 32},
        }


def _handler_for(provider: FakeToolProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            path = self.path.split("?", 1)[0]
            data = json.dumps(provider.answer(path, body)).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
