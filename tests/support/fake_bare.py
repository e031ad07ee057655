"""A fake provider on 127.0.0.1 that answers with tool calls, long streams and (optionally) no usage.

Where :mod:`tests.support.fake_provider` always answers with text and usage, this one plays the
providers the bounds are about: one that reports no usage at all (a stream not asked for
``include_usage``, an OpenAI-compatible server that never sends it), one whose answer is a tool
call whose JSON arguments stream in pieces, one that streams far past any ``max_tokens`` (it
ignores the limit). Wire formats: OpenAI chat completions (every choice of ``n``), the Responses
API and Anthropic messages, plain or streamed.

Every request is recorded (:attr:`BareProvider.received`: path and JSON body, to check what an SDK
really sent, e.g. a lowered ``max_tokens``), and :attr:`BareProvider.sent_chunks` counts the stream
chunks written, so a test sees where a stream was cut. ``hold()``/``release()`` keep requests
waiting after they were counted.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["BareProvider"]

ARGUMENTS = '{"city": "Paris", "unit": "celsius", "days": 3}'


class BareProvider:
    """``usage``: report usage (False: never). ``tool``: answer with a tool call (its arguments
    ``arguments``, streamed ``piece`` characters at a time) instead of text. ``words``: words of
    text in a text answer (one chunk each). ``chunk_delay_s``: a pause between stream chunks."""

    def __init__(
        self,
        *,
        usage: bool = False,
        tool: bool = False,
        arguments: str = ARGUMENTS,
        piece: int = 7,
        words: int = 12,
        chunk_delay_s: float = 0.0,
    ) -> None:
        self.usage = usage
        self.tool = tool
        self.arguments = arguments
        self.piece = piece
        self.words = words
        self.chunk_delay_s = chunk_delay_s
        self.received: list[tuple[str, dict[str, Any]]] = []
        self.sent_chunks = 0
        self.lock = threading.Lock()
        self._gate: threading.Event | None = None
        self._server: ThreadingHTTPServer | None = None

    def __enter__(self) -> BareProvider:
        server = _Server(("127.0.0.1", 0), _handler(self))
        self._server = server
        threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def hold(self) -> None:
        self._gate = threading.Event()

    def release(self) -> None:
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.set()

    def count(self) -> int:
        with self.lock:
            return len(self.received)

    def bodies(self) -> list[dict[str, Any]]:
        with self.lock:
            return [body for _, body in self.received]

    def text(self) -> str:
        return "".join(self.text_pieces())

    def text_pieces(self) -> list[str]:
        return [f"word{i} " for i in range(self.words)]

    def argument_pieces(self) -> list[str]:
        a = self.arguments
        return [a[i : i + self.piece] for i in range(0, len(a), self.piece)]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # a client closing a cut stream is normal here
            super().handle_error(request, client_address)


def _handler(fake: BareProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        provider = fake

    return Handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    provider: BareProvider

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        path = self.path.split("?", 1)[0]
        fake = self.provider
        with fake.lock:
            fake.received.append((path, body))
        gate = fake._gate
        if gate is not None:
            gate.wait(timeout=60)
        route = {
            "/v1/chat/completions": self._chat,
            "/v1/responses": self._responses,
            "/v1/messages": self._messages,
        }
        handler = route.get(path)
        if handler is None:
            self._json(404, {"error": {"message": f"no route {path}"}})
            return
        handler(body)

    # -- plumbing ----------------------------------------------------------------------------------

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, events: Iterator[tuple[str | None, Any]]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        fake = self.provider
        try:
            for name, data in events:
                if fake.chunk_delay_s:
                    time.sleep(fake.chunk_delay_s)
                head = f"event: {name}\n" if name else ""
                text = (
                    head + "data: " + (data if isinstance(data, str) else json.dumps(data)) + "\n\n"
                ).encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(text), text))
                self.wfile.flush()
                with fake.lock:
                    fake.sent_chunks += 1
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:  # the client closed the stream (cut, abandoned)
            self.close_connection = True

    def _usage(self, openai: bool) -> dict[str, Any] | None:
        if not self.provider.usage:
            return None
        if openai:
            return {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        return {"input_tokens": 11, "output_tokens": 7}

    # -- OpenAI chat completions -------------------------------------------------------------------

    def _chat(self, body: dict[str, Any]) -> None:
        fake = self.provider
        model = str(body.get("model", "gpt-4o-mini"))
        n_field = body.get("n")
        n: int = n_field if isinstance(n_field, int) else 1
        base = {"id": "chatcmpl-bare", "object": "chat.completion.chunk", "created": 1, "model": model}

        def call(index: int, arguments: str, first: bool) -> dict[str, Any]:
            function: dict[str, Any] = {"arguments": arguments}
            if first:
                function["name"] = "get_weather"
            item: dict[str, Any] = {"index": 0, "function": function}
            if first:
                item.update(id=f"call_{index}", type="function")
            return item

        if not body.get("stream"):
            choices = []
            for index in range(n):
                message: dict[str, Any] = {"role": "assistant", "content": None if fake.tool else fake.text()}
                if fake.tool:
                    message["tool_calls"] = [
                        {
                            "id": f"call_{index}",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": fake.arguments},
                        }
                    ]
                reason = "tool_calls" if fake.tool else "stop"
                choices.append({"index": index, "message": message, "finish_reason": reason})
            payload = {**base, "object": "chat.completion", "choices": choices}
            usage = self._usage(True)
            if usage is not None:
                payload["usage"] = usage
            self._json(200, payload)
            return

        def events() -> Iterator[tuple[str | None, Any]]:
            for index in range(n):
                delta: dict[str, Any] = {"role": "assistant", "content": None if fake.tool else ""}
                yield None, {**base, "choices": [{"index": index, "delta": delta, "finish_reason": None}]}
            for index in range(n):
                if fake.tool:
                    for i, piece in enumerate(fake.argument_pieces()):
                        delta = {"tool_calls": [call(index, piece, i == 0)]}
                        yield (
                            None,
                            {**base, "choices": [{"index": index, "delta": delta, "finish_reason": None}]},
                        )
                else:
                    for piece in fake.text_pieces():
                        choice = {"index": index, "delta": {"content": piece}, "finish_reason": None}
                        yield None, {**base, "choices": [choice]}
                reason = "tool_calls" if fake.tool else "stop"
                yield None, {**base, "choices": [{"index": index, "delta": {}, "finish_reason": reason}]}
            usage = self._usage(True)
            if usage is not None and (body.get("stream_options") or {}).get("include_usage"):
                yield None, {**base, "choices": [], "usage": usage}
            yield None, "[DONE]"

        self._sse(events())

    # -- OpenAI Responses --------------------------------------------------------------------------

    def _responses(self, body: dict[str, Any]) -> None:
        fake = self.provider
        model = str(body.get("model", "gpt-4o-mini"))
        if fake.tool:
            item: dict[str, Any] = {
                "type": "function_call",
                "id": "fc_bare",
                "call_id": "call_bare",
                "name": "get_weather",
                "arguments": fake.arguments,
                "status": "completed",
            }
        else:
            part = {"type": "output_text", "text": fake.text(), "annotations": []}
            item = {
                "type": "message",
                "id": "msg_bare",
                "status": "completed",
                "role": "assistant",
                "content": [part],
            }

        def response(status: str, output: list[Any]) -> dict[str, Any]:
            usage = self._usage(False)
            return {
                "id": "resp_bare",
                "object": "response",
                "created_at": 1,
                "status": status,
                "model": model,
                "output": output,
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
                "usage": None
                if usage is None
                else {
                    **usage,
                    "total_tokens": 18,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens_details": {"reasoning_tokens": 0},
                },
            }

        if not body.get("stream"):
            self._json(200, response("completed", [item]))
            return

        def events() -> Iterator[tuple[str | None, Any]]:
            seq = iter(range(10_000))
            yield (
                "response.created",
                {
                    "type": "response.created",
                    "response": response("in_progress", []),
                    "sequence_number": next(seq),
                },
            )
            if fake.tool:
                added = {**item, "arguments": "", "status": "in_progress"}
                yield (
                    "response.output_item.added",
                    {
                        "type": "response.output_item.added",
                        "output_index": 0,
                        "item": added,
                        "sequence_number": next(seq),
                    },
                )
                for piece in fake.argument_pieces():
                    yield (
                        "response.function_call_arguments.delta",
                        {
                            "type": "response.function_call_arguments.delta",
                            "item_id": "fc_bare",
                            "output_index": 0,
                            "delta": piece,
                            "sequence_number": next(seq),
                        },
                    )
            else:
                for piece in fake.text_pieces():
                    yield (
                        "response.output_text.delta",
                        {
                            "type": "response.output_text.delta",
                            "item_id": "msg_bare",
                            "output_index": 0,
                            "content_index": 0,
                            "delta": piece,
                            "logprobs": [],
                            "sequence_number": next(seq),
                        },
                    )
            yield (
                "response.completed",
                {
                    "type": "response.completed",
                    "response": response("completed", [item]),
                    "sequence_number": next(seq),
                },
            )

        self._sse(events())

    # -- Anthropic messages ------------------------------------------------------------------------

    def _messages(self, body: dict[str, Any]) -> None:
        fake = self.provider
        model = str(body.get("model", "claude-haiku-4-5"))
        reason = "tool_use" if fake.tool else "end_turn"
        if fake.tool:
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": "toolu_bare",
                "name": "get_weather",
                "input": json.loads(fake.arguments),
            }
        else:
            block = {"type": "text", "text": fake.text()}
        usage = self._usage(False)
        if not body.get("stream"):
            message = {
                "id": "msg_bare",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [block],
                "stop_reason": reason,
                "stop_sequence": None,
                "usage": usage or {"input_tokens": 0, "output_tokens": 0},
            }
            if usage is None:
                del message["usage"]
            self._json(200, message)
            return

        def events() -> Iterator[tuple[str | None, Any]]:
            start: dict[str, Any] = {
                "id": "msg_bare",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 11, "output_tokens": 1},
            }
            yield "message_start", {"type": "message_start", "message": start}
            if fake.tool:
                opened = {**block, "input": {}}
                yield (
                    "content_block_start",
                    {"type": "content_block_start", "index": 0, "content_block": opened},
                )
                for piece in fake.argument_pieces():
                    delta = {"type": "input_json_delta", "partial_json": piece}
                    yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
            else:
                opened = {"type": "text", "text": ""}
                yield (
                    "content_block_start",
                    {"type": "content_block_start", "index": 0, "content_block": opened},
                )
                for piece in fake.text_pieces():
                    delta = {"type": "text_delta", "text": piece}
                    yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
            yield "content_block_stop", {"type": "content_block_stop", "index": 0}
            final: dict[str, Any] = {
                "type": "message_delta",
                "delta": {"stop_reason": reason, "stop_sequence": None},
            }
            if usage is not None:
                final["usage"] = usage
            yield "message_delta", final
            yield "message_stop", {"type": "message_stop"}

        self._sse(events())
