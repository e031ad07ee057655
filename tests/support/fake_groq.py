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
import time
from typing import Any

from .fake_http_base import FakeHTTPServer, Handler

__all__ = ["REPLY", "FakeGroq"]

REPLY = "Hello from the fake Groq, one word per chunk."
PATH = "/openai/v1/chat/completions"


class FakeGroq(FakeHTTPServer):
    """``url``: the ``base_url`` for ``groq.Groq`` (the SDK adds ``/openai/v1``)."""

    def _report(self, model: str, body: dict[str, Any], streamed: bool) -> dict[str, int]:
        tokens_out = len(REPLY.split())
        tokens_in = self.report(PATH, model, body, tokens_out, streamed)
        return {
            "prompt_tokens": tokens_in,
            "completion_tokens": tokens_out,
            "total_tokens": tokens_in + tokens_out,
        }

    def handle(self, request: Handler, path: str, raw: bytes) -> None:
        if path != PATH:
            request.send_json(404, {"error": {"message": f"no route {request.path}"}})
            return
        body = json.loads(raw or b"{}")
        status = self.admit(body)
        if status != 200:
            error = {"error": {"message": "fake Groq failure", "type": "rate_limit_exceeded"}}
            request.send_json(status, error, {"retry-after-ms": "1", "x-should-retry": "true"})
            return
        model = str(body.get("model", "llama-3.3-70b-versatile"))
        base = {"id": "chatcmpl-groq", "created": int(time.time()), "model": model}
        if not body.get("stream"):
            message = {"role": "assistant", "content": REPLY}
            choice = {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
            payload: dict[str, Any] = {**base, "object": "chat.completion", "choices": [choice]}
            if self.usage:
                payload["usage"] = self._report(model, body, False)
            request.send_json(200, payload)
            return
        chunks: list[dict[str, Any]] = []
        words = REPLY.split(" ")
        for i, word in enumerate(words):
            delta = {"content": word if i == len(words) - 1 else word + " "}
            chunks.append(
                {**base, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
            )
        last: dict[str, Any] = {**base, "object": "chat.completion.chunk", "choices": []}
        if self.usage:
            usage = self._report(model, body, True)
            if (body.get("stream_options") or {}).get("include_usage"):
                last["usage"] = usage
            else:
                last["x_groq"] = {"id": "req_fake", "usage": usage}
        chunks.append(last)
        request.send_sse(chunks)  # the whole stream at once
