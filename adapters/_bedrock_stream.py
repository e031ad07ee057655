"""Meter a Bedrock ``converse_stream`` response and settle its step when the stream ends.

botocore returns ``{"stream": EventStream, ...}``; the EventStream object is left as it is (same
class, same ``close()``), only its ``_event_generator`` -- the iterator of raw event-stream messages
its ``__iter__`` reads -- is replaced by the metering one of :mod:`._provider_streams`, so the step
is settled at the end of the stream, on an error, when it is garbage-collected or when its
context ends, and the stream is cut (``budget_exceeded``) once its output, counted as it streams,
passes the output tokens reserved for it. Each message's JSON payload is read here: text,
reasoning and toolUse input deltas are counted for an estimate, the ``metadata`` event's usage is
what the call is charged.
"""

from __future__ import annotations

import json
from typing import Any

from . import _provider_streams as streams
from ._bedrock_bodies import usage_of
from ._provider_calls import ProviderCall

__all__ = ["ConverseMeter", "observe"]


class ConverseMeter(streams.Meter):
    """Reads botocore's raw ``EventStreamMessage`` objects (``headers``, ``payload``)."""

    __slots__ = ()

    def feed(self, item: Any) -> None:
        headers = getattr(item, "headers", None)
        if not isinstance(headers, dict) or headers.get(":message-type") != "event":
            return
        kind = headers.get(":event-type")
        if kind not in ("contentBlockDelta", "contentBlockStart", "metadata"):
            return
        try:
            payload = json.loads(getattr(item, "payload", b"") or b"{}")
        except ValueError:
            return
        if not isinstance(payload, dict):
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


def observe(call: ProviderCall, parsed: dict[str, Any]) -> None:
    """Meter the EventStream in ``parsed["stream"]`` and settle ``call`` when it ends."""
    events: Any = parsed.get("stream")
    generator = getattr(events, "_event_generator", None)
    if generator is None:  # not botocore's EventStream (API drift): it may cost its reservation
        call.abandon()
        return
    events._event_generator = _Messages(events, generator)
    streams.observe(call, events, ConverseMeter(), "_event_generator")
