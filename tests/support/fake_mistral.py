"""A fake Mistral API on 127.0.0.1 that the real ``mistralai`` SDK is pointed at with ``server_url=``.

It speaks Mistral's wire format: ``POST /v1/chat/completions`` as JSON, or (``"stream": true``)
as server-sent events whose last chunk (the one with ``finish_reason``) carries ``usage``, the way
Mistral sends it; ``usage=False`` reports none (an empty ``usage`` in a JSON response). It counts
the model requests it received (:meth:`FakeMistral.count`) and records the usage it reported
(:attr:`FakeMistral.reported`).
"""

from __future__ import annotations

import json
import time
from typing import Any

from .fake_http_base import FakeHTTPServer, Handler

__all__ = ["REPLY", "FakeMistral"]

REPLY = "Hello from the fake Mistral, one word per chunk."
PATH = "/v1/chat/completions"


class FakeMistral(FakeHTTPServer):
    """``url``: the ``server_url`` for ``Mistral`` (the SDK adds ``/v1/...``)."""

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
            request.send_json(404, {"message": f"no route {request.path}"})
            return
        body = json.loads(raw or b"{}")
        status = self.admit(body)
        if status != 200:
            request.send_json(status, {"message": "fake Mistral failure"})
            return
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
            payload["usage"] = self._report(model, body, False) if self.usage else {}
            request.send_json(200, payload)
            return
        words = REPLY.split(" ")
        chunks: list[dict[str, Any]] = []
        for i, word in enumerate(words):
            last = i == len(words) - 1
            choice = {"index": 0, "delta": {"content": word if last else word + " "}, "finish_reason": None}
            chunk: dict[str, Any] = {**base, "object": "chat.completion.chunk", "choices": [choice]}
            if last:
                choice["finish_reason"] = "stop"
                if self.usage:
                    chunk["usage"] = self._report(model, body, True)
            chunks.append(chunk)
        request.send_sse(chunks)
