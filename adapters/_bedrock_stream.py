"""Meter a Bedrock stream (``converse_stream``, ``invoke_model_with_response_stream``) and settle
its step when the stream ends.

botocore returns ``{"stream": EventStream, ...}`` (``{"body": EventStream, ...}``); the EventStream
object is left as it is (same class, same ``close()``), only its ``_event_generator`` -- the
iterator of raw event-stream messages its ``__iter__`` reads -- is replaced by the metering one of
:mod:`._provider_streams`, so the step is settled at the end of the stream, on an error, when it
is garbage-collected or when its context ends, and the stream is cut (``budget_exceeded``) once
its output, counted as it streams, passes the output tokens reserved for it. Each message's JSON
payload is read here: text, reasoning and toolUse input deltas are counted for an estimate, the
``metadata`` event's usage is what the call is charged; an invoke stream's ``chunk`` events carry
the model's own stream events (Anthropic, Nova, Llama) and, in the last one, Bedrock's invocation
metrics.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from ..kernel.pricing import TokenUsage
from . import _bedrock_bodies as bodies
from . import _provider_streams as streams
from ._bedrock_bodies import usage_of
from ._provider_calls import ProviderCall

__all__ = ["ConverseMeter", "InvokeMeter", "observe"]


def _payload(item: Any, *kinds: str) -> dict[str, Any] | None:
    """The JSON payload of a raw event-stream message of one of ``kinds`` (None: another kind)."""
    headers = getattr(item, "headers", None)
    if not isinstance(headers, dict) or headers.get(":message-type") != "event":
        return None
    if headers.get(":event-type") not in kinds:
        return None
    try:
        payload = json.loads(getattr(item, "payload", b"") or b"{}")
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


class ConverseMeter(streams.Meter):
    """Reads botocore's raw ``EventStreamMessage`` objects (``headers``, ``payload``)."""

    __slots__ = ()

    def feed(self, item: Any) -> None:
        kind = getattr(item, "headers", {}).get(":event-type")
        payload = _payload(item, "contentBlockDelta", "contentBlockStart", "metadata")
        if payload is None:
            return
        if kind == "metadata":
            tokens = usage_of(payload.get("usage"))
            if tokens is not None:
                self.tokens, self.final = tokens, True
            return
        if kind == "contentBlockStart":
            tool = (payload.get("start") or {}).get("toolUse") or {}
            self.counted(tool.get("name") if isinstance(tool, dict) else None)
            return
        delta = payload.get("delta")
        if not isinstance(delta, dict):
            return
        self.seen(delta.get("text"))
        tool = delta.get("toolUse")
        if isinstance(tool, dict):
            self.counted(tool.get("input"))
        reasoning = delta.get("reasoningContent")
        if isinstance(reasoning, dict):
            self.counted(reasoning.get("text"))


class InvokeMeter(streams.Meter):
    """Reads the ``chunk`` events of ``invoke_model_with_response_stream``: each carries one JSON
    event of the model's own stream format, base64-encoded; the last one Bedrock's
    ``amazon-bedrock-invocationMetrics`` (the token counts of the whole call)."""

    __slots__ = ()

    def feed(self, item: Any) -> None:
        payload = _payload(item, "chunk")
        encoded = payload.get("bytes") if payload is not None else None
        if not isinstance(encoded, str):
            return
        try:
            event = json.loads(base64.b64decode(encoded))
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        metrics = event.get("amazon-bedrock-invocationMetrics")
        if isinstance(metrics, dict):
            found = [metrics.get(key) for key in ("inputTokenCount", "outputTokenCount")]
            counts = [n for n in found if isinstance(n, int) and not isinstance(n, bool)]
            if len(counts) == 2:
                self.tokens, self.final = TokenUsage(counts[0], counts[1]), True
        self._generated(event)

    def _generated(self, event: dict[str, Any]) -> None:
        delta = event.get("delta")
        if event.get("type") == "content_block_delta" and isinstance(delta, dict):  # Anthropic
            self.seen(delta.get("text"))
            self.counted(delta.get("partial_json"))
            self.counted(delta.get("thinking"))
            return
        if "type" in event:  # Anthropic's other events: no generated text
            return
        block = event.get("contentBlockDelta")
        if isinstance(block, dict):  # Nova
            nova: Any = block.get("delta")
            nova = nova if isinstance(nova, dict) else {}
            self.seen(nova.get("text"))
            tool = nova.get("toolUse")
            self.counted(tool.get("input") if isinstance(tool, dict) else None)
            return
        if "generation" in event:  # Llama
            self.seen(event.get("generation"))
            return
        if any(key in event for key in ("messageStart", "messageStop", "metadata", "contentBlockStop")):
            return
        for text in bodies.strings(event):  # a shape not known: all of it may be generated
            self.counted(text)


class _Messages:
    """The EventStream's raw message generator; closing it also closes the HTTP response."""

    __slots__ = ("events", "generator")

    def __init__(self, events: Any, generator: Any) -> None:
        self.events = events
        self.generator = generator

    def __iter__(self) -> _Messages:
        return self

    def __next__(self) -> Any:
        return next(self.generator)

    def close(self) -> None:
        self.generator.close()
        self.events.close()


def observe(call: ProviderCall, parsed: dict[str, Any], key: str, meter: streams.Meter) -> None:
    """Meter the EventStream in ``parsed[key]`` with ``meter`` and settle ``call`` when it ends."""
    events: Any = parsed.get(key)
    generator = getattr(events, "_event_generator", None)
    if generator is None:  # not botocore's EventStream (API drift): it may cost its reservation
        call.abandon()
        return
    events._event_generator = _Messages(events, generator)
    streams.observe(call, events, meter, "_event_generator")
