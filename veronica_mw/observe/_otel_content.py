"""Message contents on model-call spans: off unless the GenAI content opt-in asks for them.

``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is the GenAI conventions' switch: ``true``
(the older boolean form), ``SPAN_ONLY`` or ``SPAN_AND_EVENT`` put the request messages and the
response text on the span as ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (JSON, in the
conventions' role/parts shape). Anything else — unset, ``false``, ``NO_CONTENT``, ``EVENT_ONLY``
(veronica-mw emits no log events) — records no content at all.

The contents come from the call's node: when an observer asks for bodies, the kernel and the
adapters attach what was sent and the response text to it (``CallNode.io``); nothing is read from
the call's arguments here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from ..kernel.graph import CallNode

ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_ON = frozenset({"true", "1", "yes", "span_only", "span_and_event"})


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    if isinstance(content, (list, tuple)):
        parts: list[dict[str, Any]] = []
        for block in content:
            text = (
                block if isinstance(block, str) else block.get("text") if isinstance(block, Mapping) else None
            )
            parts.append(
                {"type": "text", "content": text}
                if isinstance(text, str)
                else {"type": "generic", "content": block}
            )
        return parts
    return [] if content is None else [{"type": "generic", "content": content}]


def input_messages(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The conventions' input messages from a recorded request (provider-style role/content)."""
    messages: list[dict[str, Any]] = []
    for message in request.get("messages") or ():
        if isinstance(message, Mapping):
            messages.append(
                {"role": str(message.get("role", "user")), "parts": _parts(message.get("content"))}
            )
    prompt = request.get("prompt")
    if isinstance(prompt, str):
        messages.append({"role": "user", "parts": _parts(prompt)})
    return messages


class ContentCapture:
    """Whether contents are recorded, and how they go on a span."""

    __slots__ = ("enabled",)

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    @classmethod
    def from_env(cls) -> ContentCapture:
        return cls(os.environ.get(ENV, "").strip().lower() in _ON)

    def record(self, span: Span, node: CallNode) -> None:
        if node.kind != "llm":
            return
        io = node.io  # filled only because this observer asked for bodies (record_bodies)
        if io is None:
            return
        request = io.get("request")
        if isinstance(request, Mapping):
            messages = input_messages(request)
            if messages:
                span.set_attribute("gen_ai.input.messages", json.dumps(messages, default=repr))
        text = io.get("response_text")
        if isinstance(text, str):
            output = [{"role": "assistant", "parts": _parts(text)}]
            span.set_attribute("gen_ai.output.messages", json.dumps(output, default=repr))
