"""A small fake model provider on 127.0.0.1 that real provider SDKs are pointed at with ``base_url=``.

It speaks just enough of four wire formats for the SDKs to parse what it sends, as JSON or as
server-sent events, always with token usage:

- OpenAI chat completions ``POST /v1/chat/completions`` (a usage chunk only when the request asks
  for it with ``stream_options.include_usage``, like the real API), the Responses API
  ``POST /v1/responses`` and embeddings ``POST /v1/embeddings`` (float or base64);
- Anthropic messages ``POST /v1/messages`` (also ``?beta=true``);
- Google Gemini ``POST /v1beta/models/<model>:generateContent`` and ``:streamGenerateContent``.

It counts every model request it received (:meth:`FakeProvider.count`), records the usage it reported
(:attr:`FakeProvider.reported`), answers the next requests with 429 or 500 on demand
(:meth:`FakeProvider.fail_next`, with a 1 ms ``retry-after-ms`` so SDK retries are quick), and can
hold requests until released (:meth:`FakeProvider.hold`) to keep many in flight at once.

Usage::

    with FakeProvider() as server:
        client = openai.OpenAI(base_url=server.openai_url, api_key="test")
        client.chat.completions.create(model="gpt-4o-mini", messages=[...])
        assert server.count() == 1
"""

from __future__ import annotations

import base64
import json
import re
import struct
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

__all__ = ["FakeProvider", "Received", "Reported", "cost_of", "prompt_tokens"]

REPLY = "Hello from the fake provider, one word per chunk."


@dataclass(frozen=True)
class Received:
    """One model request as the server received it."""

    path: str
    query: str
    body: dict[str, Any]
    headers: dict[str, str]
    status: int  # what the server answered


@dataclass(frozen=True)
class Reported:
    """The usage the server reported for one successful request."""

    path: str
    model: str
    input_tokens: int
    output_tokens: int
    streamed: bool


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def prompt_tokens(body: Mapping[str, Any]) -> int:
    """The input tokens the server reports for a request: characters of its prompt / 4, at least 1."""
    parts = [body.get(key) for key in ("messages", "input", "system", "contents", "instructions", "prompt")]
    return max(1, sum(len(s) for s in _strings(parts)) // 4)


def _fill(schema: Mapping[str, Any], text: str) -> Any:
    """A value matching a (simple) JSON schema, so structured-output parsing succeeds."""
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        return {name: _fill(sub, text) for name, sub in (schema.get("properties") or {}).items()}
    if kind == "string":
        return text
    if kind in ("integer", "number"):
        return 1
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    return None


class FakeProvider:
    """A threaded HTTP server speaking the OpenAI, Anthropic and Gemini wire formats (see module doc).

    ``reply``: the assistant text (one SSE chunk per word); ``chunk_delay_s``: a pause between
    stream chunks (to abandon a stream half-way); ``output_tokens``: the output tokens reported
    (default: the words of the reply).
    """

    def __init__(self, reply: str = REPLY, *, chunk_delay_s: float = 0.0, output_tokens: int | None = None):
        self.reply = reply
        self.chunk_delay_s = chunk_delay_s
        self.output_tokens = output_tokens if output_tokens is not None else len(reply.split())
        self.received: list[Received] = []
        self.reported: list[Reported] = []
        self._lock = threading.Lock()
        self._failures: list[int] = []
        self._gate: threading.Event | None = None
        self._arrived = threading.Semaphore(0)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> FakeProvider:
        server = _Server(("127.0.0.1", 0), _handler_for(self))
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.02,), name="fake-provider", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_url(self) -> str:
        """``base_url`` for ``openai.OpenAI`` (and LiteLLM's ``api_base`` for OpenAI models)."""
        return self.url + "/v1"

    @property
    def anthropic_url(self) -> str:
        """``base_url`` for ``anthropic.Anthropic``."""
        return self.url

    # -- control -----------------------------------------------------------------------------------

    def fail_next(self, count: int = 1, status: int = 429) -> None:
        """Answer the next ``count`` model requests with ``status`` (429 or 5xx: SDKs retry them)."""
        with self._lock:
            self._failures.extend([status] * count)

    def hold(self) -> None:
        """Keep every model request waiting (after it was counted) until :meth:`release`."""
        self._gate = threading.Event()

    def release(self) -> None:
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.set()

    def wait_for_requests(self, n: int, timeout_s: float = 60.0) -> bool:
        """Block until ``n`` more model requests arrived (for tests holding requests in flight)."""
        deadline = time.monotonic() + timeout_s
        for _ in range(n):
            if not self._arrived.acquire(timeout=max(0.0, deadline - time.monotonic())):
                return False
        return True

    def count(self, path: str | None = None) -> int:
        """Model requests received (all, or those whose path starts with ``path``), failures included."""
        with self._lock:
            return sum(1 for r in self.received if path is None or r.path.startswith(path))

    def reset(self) -> None:
        with self._lock:
            self.received.clear()
            self.reported.clear()
            self._failures.clear()

    # -- request handling (called on the server's threads) -----------------------------------------

    def _admit(self, path: str, query: str, body: dict[str, Any], headers: dict[str, str]) -> int:
        with self._lock:
            status = self._failures.pop(0) if self._failures else 200
            self.received.append(Received(path, query, body, headers, status))
        self._arrived.release()
        gate = self._gate
        if gate is not None:
            gate.wait(timeout=120)
        return status

    def _report(
        self, path: str, model: str, body: Mapping[str, Any], streamed: bool, output: bool = True
    ) -> tuple[int, int]:
        usage = (prompt_tokens(body), self.output_tokens if output else 0)
        with self._lock:
            self.reported.append(Reported(path, model, usage[0], usage[1], streamed))
        return usage

    def _words(self) -> list[str]:
        words = self.reply.split(" ")
        return [w if i == len(words) - 1 else w + " " for i, w in enumerate(words)]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # hundreds of clients connect at once in the concurrency tests

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client dropping its keep-alive connection (or an abandoned stream) is normal here.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


def _handler_for(provider: FakeProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        fake = provider

    return Handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes: no 40 ms delayed ACKs
    fake: FakeProvider

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # -- plumbing ----------------------------------------------------------------------------------

    def _send_json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _start_sse(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("cache-control", "no-cache")
        self.end_headers()

    def _chunk(self, text: str) -> bool:
        data = text.encode()
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        except OSError:  # the client went away (an abandoned stream)
            return False
        return True

    def _end_sse(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            pass

    def _event(self, data: Any, event: str | None = None) -> bool:
        head = f"event: {event}\n" if event else ""
        payload = data if isinstance(data, str) else json.dumps(data)
        if self.fake.chunk_delay_s:
            time.sleep(self.fake.chunk_delay_s)
        return self._chunk(f"{head}data: {payload}\n\n")

    def _fail(self, status: int, anthropic: bool) -> None:
        message = "rate limited by the fake provider" if status == 429 else "fake provider failure"
        if anthropic:
            kind = "rate_limit_error" if status == 429 else "api_error"
            body: Any = {"type": "error", "error": {"type": kind, "message": message}}
        else:
            body = {"error": {"message": message, "type": "rate_limit" if status == 429 else "server_error"}}
        self._send_json(status, body, {"retry-after-ms": "1", "x-should-retry": "true"})

    def do_POST(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            self._send_json(400, {"error": {"message": "invalid JSON"}})
            return
        path = parts.path
        routes = {
            "/v1/chat/completions": self._chat,
            "/v1/responses": self._responses,
            "/v1/embeddings": self._embeddings,
            "/v1/messages": self._messages,
        }
        gemini = re.fullmatch(r"/v1(?:beta)?/models/([^:]+):(generateContent|streamGenerateContent)", path)
        route = routes.get(path)
        if route is None and gemini is None:
            self._send_json(404, {"error": {"message": f"no route {path}"}})
            return
        headers = {
            k.lower(): v for k, v in self.headers.items() if k.lower() not in ("authorization", "x-api-key")
        }
        status = self.fake._admit(path, parts.query, body, headers)
        if status != 200:
            self._fail(status, anthropic=path == "/v1/messages")
            return
        if gemini is not None:
            self._gemini(path, body, gemini.group(1), stream=gemini.group(2) == "streamGenerateContent")
        elif route is not None:
            route(body)

    # -- OpenAI chat completions ---------------------------------------------------------------------

    def _text_for(self, response_format: Any) -> str:
        if isinstance(response_format, Mapping) and response_format.get("type") == "json_schema":
            schema = response_format.get("json_schema", response_format).get("schema") or {}
            return json.dumps(_fill(schema, self.fake.reply))
        return self.fake.reply

    def _chat(self, body: dict[str, Any]) -> None:
        model = str(body.get("model", "gpt-4o-mini"))
        created = int(time.time())
        text = self._text_for(body.get("response_format"))
        if not body.get("stream"):
            tokens_in, tokens_out = self.fake._report("/v1/chat/completions", model, body, False)
            message = {"role": "assistant", "content": text, "refusal": None}
            self._send_json(
                200,
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
                    "usage": {
                        "prompt_tokens": tokens_in,
                        "completion_tokens": tokens_out,
                        "total_tokens": tokens_in + tokens_out,
                    },
                },
            )
            return
        self._start_sse()
        base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": created, "model": model}
        pieces = [text] if text != self.fake.reply else self.fake._words()
        delta: dict[str, Any] = {"role": "assistant", "content": ""}
        if not self._event({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}):
            return
        for piece in pieces:
            chunk = {**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
            if not self._event(chunk):
                return
        if not self._event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}):
            return
        if (body.get("stream_options") or {}).get("include_usage"):
            tokens_in, tokens_out = self.fake._report("/v1/chat/completions", model, body, True)
            usage = {
                "prompt_tokens": tokens_in,
                "completion_tokens": tokens_out,
                "total_tokens": tokens_in + tokens_out,
            }
            if not self._event({**base, "choices": [], "usage": usage}):
                return
        self._event("[DONE]")
        self._end_sse()

    # -- OpenAI Responses ----------------------------------------------------------------------------

    def _responses(self, body: dict[str, Any]) -> None:
        model = str(body.get("model", "gpt-4o-mini"))
        text_format = (body.get("text") or {}).get("format")
        text = self._text_for(text_format)
        created = int(time.time())
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        item = {
            "type": "message",
            "id": "msg_fake",
            "status": "completed",
            "role": "assistant",
            "content": [part],
        }

        def response(status: str, output: list[Any], usage: Any) -> dict[str, Any]:
            return {
                "id": "resp_fake",
                "object": "response",
                "created_at": created,
                "status": status,
                "model": model,
                "output": output,
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
                "usage": usage,
                "error": None,
                "incomplete_details": None,
                "instructions": None,
                "metadata": {},
                "temperature": 1.0,
                "top_p": 1.0,
                "text": body.get("text") or {"format": {"type": "text"}},
            }

        def usage_of(streamed: bool) -> dict[str, Any]:
            tokens_in, tokens_out = self.fake._report("/v1/responses", model, body, streamed)
            return {
                "input_tokens": tokens_in,
                "output_tokens": tokens_out,
                "total_tokens": tokens_in + tokens_out,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            }

        if not body.get("stream"):
            self._send_json(200, response("completed", [item], usage_of(False)))
            return
        self._start_sse()
        seq = iter(range(10_000))
        empty_item = {**item, "status": "in_progress", "content": []}
        empty_part = {**part, "text": ""}
        ids = {"item_id": "msg_fake", "output_index": 0}
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": response("in_progress", [], None)},
            {"type": "response.in_progress", "response": response("in_progress", [], None)},
            {"type": "response.output_item.added", "output_index": 0, "item": empty_item},
            {"type": "response.content_part.added", **ids, "content_index": 0, "part": empty_part},
        ]
        pieces = [text] if text != self.fake.reply else self.fake._words()
        for piece in pieces:
            events.append(
                {
                    "type": "response.output_text.delta",
                    **ids,
                    "content_index": 0,
                    "delta": piece,
                    "logprobs": [],
                }
            )
        events += [
            {"type": "response.output_text.done", **ids, "content_index": 0, "text": text, "logprobs": []},
            {"type": "response.content_part.done", **ids, "content_index": 0, "part": part},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
        ]
        for event in events:
            if not self._event({**event, "sequence_number": next(seq)}, event["type"]):
                return
        done = {"type": "response.completed", "response": response("completed", [item], usage_of(True))}
        if self._event({**done, "sequence_number": next(seq)}, "response.completed"):
            self._end_sse()

    # -- OpenAI embeddings ---------------------------------------------------------------------------

    def _embeddings(self, body: dict[str, Any]) -> None:
        model = str(body.get("model", "text-embedding-3-small"))
        inputs = body.get("input")
        count = len(inputs) if isinstance(inputs, list) and inputs and not isinstance(inputs[0], int) else 1
        vector = [0.25, 0.5, 0.75]
        data: list[dict[str, Any]] = []
        for index in range(count):
            embedding: Any = vector
            if body.get("encoding_format") == "base64":
                embedding = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens_in = self.fake._report("/v1/embeddings", model, body, False, output=False)[0]
        usage = {"prompt_tokens": tokens_in, "total_tokens": tokens_in}
        self._send_json(200, {"object": "list", "data": data, "model": model, "usage": usage})

    # -- Anthropic messages --------------------------------------------------------------------------

    def _messages(self, body: dict[str, Any]) -> None:
        model = str(body.get("model", "claude-haiku-4-5"))
        text = self.fake.reply
        if not body.get("stream"):
            tokens_in, tokens_out = self.fake._report("/v1/messages", model, body, False)
            self._send_json(
                200,
                {
                    "id": "msg_fake",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [{"type": "text", "text": text}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": tokens_in,
                        "output_tokens": tokens_out,
                        "cache_read_input_tokens": 0,
                        "cache_creation_input_tokens": 0,
                    },
                },
            )
            return
        self._start_sse()
        tokens_in = prompt_tokens(body)
        start = {
            "type": "message_start",
            "message": {
                "id": "msg_fake",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": tokens_in, "output_tokens": 1},
            },
        }
        events: list[dict[str, Any]] = [
            start,
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ]
        for piece in self.fake._words():
            events.append(
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}
            )
        events.append({"type": "content_block_stop", "index": 0})
        for event in events:
            if not self._event(event, event["type"]):
                return
        tokens_out = self.fake._report("/v1/messages", model, body, True)[1]
        delta = {  # cumulative usage, the input included, as the Messages API sends it
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {
                "input_tokens": tokens_in,
                "output_tokens": tokens_out,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 0,
            },
        }
        if self._event(delta, "message_delta") and self._event({"type": "message_stop"}, "message_stop"):
            self._end_sse()

    # -- Google Gemini -------------------------------------------------------------------------------

    def _gemini(self, path: str, body: dict[str, Any], model: str, *, stream: bool) -> None:
        def chunk(text: str, usage: tuple[int, int] | None) -> dict[str, Any]:
            candidate: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}
            payload: dict[str, Any] = {"candidates": [candidate], "modelVersion": model}
            if usage is not None:
                candidate["finishReason"] = "STOP"
                payload["usageMetadata"] = {
                    "promptTokenCount": usage[0],
                    "candidatesTokenCount": usage[1],
                    "totalTokenCount": usage[0] + usage[1],
                }
            return payload

        if not stream:
            self._send_json(200, chunk(self.fake.reply, self.fake._report(path, model, body, False)))
            return
        self._start_sse()
        words = self.fake._words()
        for word in words[:-1]:
            if not self._event(chunk(word, None)):
                return
        if self._event(chunk(words[-1], self.fake._report(path, model, body, True))):
            self._end_sse()


def cost_of(reported: list[Reported], provider: str | None = None) -> float:
    """What veronica-mw should charge for the usage the server reported (genai-prices)."""
    from veronica_mw.kernel.pricing import TokenUsage, price_usage

    return sum(price_usage(TokenUsage(r.input_tokens, r.output_tokens), r.model, provider) for r in reported)
