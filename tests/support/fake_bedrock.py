"""A fake Amazon Bedrock runtime on 127.0.0.1 that boto3's ``bedrock-runtime`` client is pointed
at with ``endpoint_url=`` (and dummy credentials).

It answers ``POST /model/<modelId>/converse`` with a Converse response whose ``usage`` holds the
tokens it reports; ``/converse-stream`` with the same answer as a real AWS event stream (binary
framing, :mod:`.aws_eventstream`): ``messageStart``, one ``contentBlockDelta`` per word, a toolUse
block whose input arrives in pieces when ``tool_input`` is set, ``messageStop`` and a ``metadata``
event with the usage; ``/invoke`` with a body in the model family's own format (Anthropic messages
for ``anthropic.*``, Amazon Nova for ``amazon.nova*``, Meta Llama for ``meta.*``, Mistral
otherwise) and the token counts in the ``x-amzn-bedrock-*-token-count`` headers;
``/invoke-with-response-stream`` with the family's stream events in base64 ``chunk`` events, the
last one carrying ``amazon-bedrock-invocationMetrics``. ``usage=False`` reports no usage anywhere;
``usage_body=False`` / ``usage_headers=False`` leave it out of the invoke body / headers. ``reply``
is the text it answers, whatever ``maxTokens`` asks (a model that ignores it). It counts the model
requests it received (:meth:`FakeBedrock.count`, bodies in :attr:`FakeBedrock.bodies`), records
the usage it reported (:attr:`FakeBedrock.reported`) and fails the next requests on demand
(:meth:`FakeBedrock.fail_next`: 429 ``ThrottlingException``, 5xx ``InternalServerException``).
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any
from urllib.parse import unquote

from .aws_eventstream import encode_event
from .fake_http_base import FakeHTTPServer, Handler

__all__ = ["REPLY", "FakeBedrock"]

REPLY = "Hello from the fake Bedrock runtime."
_ROUTE = re.compile(r"/model/([^/]+)/(converse|converse-stream|invoke|invoke-with-response-stream)")


class FakeBedrock(FakeHTTPServer):
    """``url``: the ``endpoint_url`` for ``boto3.client("bedrock-runtime")``."""

    def __init__(
        self,
        *,
        usage: bool = True,
        reply: str = REPLY,
        tool_input: str | None = None,
        usage_body: bool = True,
        usage_headers: bool = True,
    ) -> None:
        super().__init__(usage=usage)
        self.reply = reply
        self.tool_input = tool_input
        self.usage_body = usage_body
        self.usage_headers = usage_headers

    def _tokens(self, path: str, model: str, body: dict[str, Any], streamed: bool) -> tuple[int, int]:
        tokens_out = len(self.reply.split()) + len((self.tool_input or "").split())
        return self.report(path, model, body, tokens_out, streamed), tokens_out

    def handle(self, request: Handler, path: str, raw: bytes) -> None:
        match = _ROUTE.fullmatch(path)
        if match is None:
            request.send_json(404, {"message": f"no route {request.path}"})
            return
        body = json.loads(raw or b"{}")
        status = self.admit(body)
        if status != 200:
            kind = "ThrottlingException" if status == 429 else "InternalServerException"
            request.send_json(status, {"message": "fake Bedrock failure"}, {"x-amzn-ErrorType": kind})
            return
        model, operation = unquote(match.group(1)), match.group(2)
        if operation == "converse":
            self._converse(request, path, model, body)
        elif operation == "converse-stream":
            self._converse_stream(request, path, model, body)
        elif operation == "invoke-with-response-stream":
            self._invoke_stream(request, path, model, body)
        else:
            self._invoke(request, path, model, body)

    def _converse(self, request: Handler, path: str, model: str, body: dict[str, Any]) -> None:
        content: list[dict[str, Any]] = [{"text": self.reply}]
        if self.tool_input is not None:
            tool = {"toolUseId": "tool-1", "name": "lookup", "input": json.loads(self.tool_input)}
            content.append({"toolUse": tool})
        payload: dict[str, Any] = {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": "end_turn" if self.tool_input is None else "tool_use",
            "metrics": {"latencyMs": 1},
        }
        if self.usage:
            tokens_in, tokens_out = self._tokens(path, model, body, False)
            payload["usage"] = {
                "inputTokens": tokens_in,
                "outputTokens": tokens_out,
                "totalTokens": tokens_in + tokens_out,
            }
        request.send_json(200, payload)

    def _converse_stream(self, request: Handler, path: str, model: str, body: dict[str, Any]) -> None:
        events = [encode_event("messageStart", {"role": "assistant"})]
        words = self.reply.split(" ")
        for i, word in enumerate(words):
            delta: dict[str, Any] = {"text": word if i == len(words) - 1 else word + " "}
            events.append(encode_event("contentBlockDelta", {"contentBlockIndex": 0, "delta": delta}))
        events.append(encode_event("contentBlockStop", {"contentBlockIndex": 0}))
        if self.tool_input is not None:
            start: dict[str, Any] = {"toolUse": {"toolUseId": "tool-1", "name": "lookup"}}
            events.append(encode_event("contentBlockStart", {"contentBlockIndex": 1, "start": start}))
            text = self.tool_input
            for piece in (text[i : i + 8] for i in range(0, len(text), 8)):
                delta = {"toolUse": {"input": piece}}
                events.append(encode_event("contentBlockDelta", {"contentBlockIndex": 1, "delta": delta}))
            events.append(encode_event("contentBlockStop", {"contentBlockIndex": 1}))
        stop = "end_turn" if self.tool_input is None else "tool_use"
        events.append(encode_event("messageStop", {"stopReason": stop}))
        if self.usage:
            tokens_in, tokens_out = self._tokens(path, model, body, True)
            usage = {
                "inputTokens": tokens_in,
                "outputTokens": tokens_out,
                "totalTokens": tokens_in + tokens_out,
            }
            events.append(encode_event("metadata", {"usage": usage, "metrics": {"latencyMs": 1}}))
        request.send_bytes("application/vnd.amazon.eventstream", b"".join(events))

    def _invoke(self, request: Handler, path: str, model: str, body: dict[str, Any]) -> None:
        tokens_in, tokens_out = self._tokens(path, model, body, False) if self.usage else (0, 0)
        with_usage = self.usage and self.usage_body
        payload: dict[str, Any]
        if model.startswith("anthropic."):
            payload = {
                "id": "msg_bedrock",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": self.reply}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
            }
            if with_usage:
                payload["usage"] = {"input_tokens": tokens_in, "output_tokens": tokens_out}
        elif model.startswith("amazon.nova"):
            message = {"role": "assistant", "content": [{"text": self.reply}]}
            payload = {"output": {"message": message}, "stopReason": "end_turn"}
            if with_usage:
                payload["usage"] = {
                    "inputTokens": tokens_in,
                    "outputTokens": tokens_out,
                    "totalTokens": tokens_in + tokens_out,
                }
        elif model.startswith("meta."):
            payload = {"generation": self.reply, "stop_reason": "stop"}
            if with_usage:
                payload["prompt_token_count"] = tokens_in
                payload["generation_token_count"] = tokens_out
        else:  # Mistral's body: no usage in it, ever
            payload = {"outputs": [{"text": self.reply, "stop_reason": "stop"}]}
        headers = {}
        if self.usage and self.usage_headers:
            headers = {
                "x-amzn-bedrock-input-token-count": str(tokens_in),
                "x-amzn-bedrock-output-token-count": str(tokens_out),
            }
        request.send_bytes("application/json", json.dumps(payload).encode(), 200, headers)

    def _invoke_stream(self, request: Handler, path: str, model: str, body: dict[str, Any]) -> None:
        """The model family's own stream events, each in a base64 ``chunk``; Bedrock's invocation
        metrics (the usage) in the last one."""
        words = self.reply.split(" ")
        pieces = [word if i == len(words) - 1 else word + " " for i, word in enumerate(words)]
        events: list[dict[str, Any]]
        if model.startswith("anthropic."):
            events = [{"type": "message_start", "message": {"id": "msg_bedrock", "role": "assistant"}}]
            events.append(
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
            )
            for piece in pieces:
                events.append(
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": piece},
                    }
                )
            events.append({"type": "content_block_stop", "index": 0})
            events.append({"type": "message_delta", "delta": {"stop_reason": "end_turn"}})
            events.append({"type": "message_stop"})
        elif model.startswith("amazon.nova"):
            events = [{"messageStart": {"role": "assistant"}}]
            events.extend(
                {"contentBlockDelta": {"delta": {"text": p}, "contentBlockIndex": 0}} for p in pieces
            )
            events.append({"contentBlockStop": {"contentBlockIndex": 0}})
            events.append({"messageStop": {"stopReason": "end_turn"}})
        elif model.startswith("meta."):
            events = [{"generation": piece, "stop_reason": None} for piece in pieces]
            events[-1]["stop_reason"] = "stop"
        else:  # Mistral's stream
            events = [{"outputs": [{"text": piece, "stop_reason": None}]} for piece in pieces]
            events[-1]["outputs"][0]["stop_reason"] = "stop"
        if self.usage:
            tokens_in, tokens_out = self._tokens(path, model, body, True)
            metrics = {"inputTokenCount": tokens_in, "outputTokenCount": tokens_out, "invocationLatency": 1}
            events[-1]["amazon-bedrock-invocationMetrics"] = metrics
        data = b"".join(
            encode_event("chunk", {"bytes": base64.b64encode(json.dumps(e).encode()).decode()})
            for e in events
        )
        request.send_bytes("application/vnd.amazon.eventstream", data)
