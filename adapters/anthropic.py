"""Anthropic SDK instrumentation: every Messages API request inside an execution context is one step.

``veronica_mw.instrument("anthropic")`` patches the SDK once, process-wide (the same patch points
as the OpenAI SDK, both being Stainless-generated: :mod:`._provider_stainless`). Inside a context,
each ``POST /v1/messages`` — ``messages.create`` (plain or ``stream=True``), ``messages.stream()``,
``beta.messages.create``/``stream``, sync or async, raw or not — is admitted before it is sent,
with its worst case reserved (estimated prompt tokens plus ``max_tokens``), and settled with the
usage the API reported (cache reads and writes included). Token counting and batch endpoints are
not model calls and pass through. ``beta.messages.tool_runner(...)`` (sync, async, streamed): each
tool run is a ``tool`` step admitted before it runs, and a refusal ends the loop with the halt
(:mod:`._anthropic_tools`). The SDK's retries each draw one retry from
``max_retries_total``; a refused retry is raised from the SDK's retry wait, where anthropic does
not wrap it. Tested with anthropic 2.x.
"""

from __future__ import annotations

from .. import MissingFrameworkError

try:
    import anthropic as _anthropic
except ImportError as exc:
    raise MissingFrameworkError("anthropic", "anthropic", exc) from exc

import json
from collections.abc import Mapping
from typing import Any

from ..kernel.pricing import TokenUsage
from . import _anthropic_tools as _tools
from . import _provider_stainless as stainless
from ._provider_calls import Outcome, Plan, limit, text_tokens
from ._provider_patch import Instrumentation, Patches
from ._provider_streams import Meter

__all__ = ["instrument", "instrumented", "uninstrument"]

PROVIDER = "anthropic"


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def tokens(usage: Any, base: TokenUsage | None = None) -> TokenUsage | None:
    """Anthropic usage as the kernel counts it: input including cache reads and writes (Anthropic
    reports ``input_tokens`` without them). ``base``: what an earlier stream event reported."""
    if usage is None:
        return base
    previous = base or TokenUsage()
    fresh = _get(usage, "input_tokens")
    read = _get(usage, "cache_read_input_tokens")
    write = _get(usage, "cache_creation_input_tokens")
    out = _get(usage, "output_tokens")
    cache_read = _count(read) if read is not None else previous.cache_read_tokens
    cache_write = _count(write) if write is not None else previous.cache_write_tokens
    if fresh is not None:
        total_in = _count(fresh) + cache_read + cache_write
    else:
        total_in = previous.input_tokens
    return TokenUsage(
        total_in, _count(out) if out is not None else previous.output_tokens, cache_read, cache_write
    )


def _model(obj: Any) -> str | None:
    model = _get(obj, "model")
    return model if isinstance(model, str) and model else None


def _length(value: Any) -> int:
    return len(value) if isinstance(value, str) else 0


def _block_chars(block: Any) -> int:
    """Characters the model generated in one content block: text, thinking, or a tool call's name
    and JSON input."""
    chars = _length(_get(block, "text")) + _length(_get(block, "thinking"))
    if _get(block, "type") in ("tool_use", "server_tool_use"):
        tool_input = _get(block, "input")
        chars += _length(_get(block, "name")) + (
            len(json.dumps(tool_input, default=str)) if tool_input else 0
        )
    return chars


def _outcome(message: Any) -> Outcome:
    chars = sum(_block_chars(block) for block in _get(message, "content") or ())
    return tokens(_get(message, "usage")), _model(message), chars


class _MessagesMeter(Meter):
    """``message_start`` carries the input usage and the model; ``message_delta`` the final output.

    The output counted at ``message_start`` is a placeholder (1): until a ``message_delta`` reports
    usage the stream's output is unknown, so the start's usage is held aside (``started``) and a
    stream that ends without one is estimated (the prompt estimate, and its deltas: text, thinking
    and tool-call JSON, ``input_json_delta``), never charged the placeholder."""

    __slots__ = ("started",)

    def __init__(self) -> None:
        super().__init__()
        self.started: TokenUsage | None = None

    def feed(self, event: Any) -> None:
        kind = getattr(event, "type", None)
        if kind == "content_block_delta":
            delta = getattr(event, "delta", None)
            self.seen(getattr(delta, "text", None))
            self.counted(getattr(delta, "partial_json", None))
            self.counted(getattr(delta, "thinking", None))
        elif kind == "content_block_start":
            self.counted(getattr(getattr(event, "content_block", None), "name", None))
        elif kind == "message_start":
            message = getattr(event, "message", None)
            self.model = _model(message) or self.model
            self.started = tokens(getattr(message, "usage", None), self.started)
        elif kind == "message_delta":
            usage = getattr(event, "usage", None)
            if usage is not None:
                self.tokens = tokens(usage, self.started)
                self.final = self.tokens is not None


_MESSAGES = stainless.Endpoint(_outcome, _MessagesMeter)


class _Endpoints:
    """``POST /v1/messages`` (and its beta twin) is the model request; model and reservation are
    computed here and only here."""

    def plan(self, options: Any) -> tuple[Plan, stainless.Endpoint] | None:
        if str(getattr(options, "method", "")).lower() != "post":
            return None
        url = str(getattr(options, "url", "")).split("?", 1)[0].rstrip("/")
        body = getattr(options, "json_data", None)
        if not url.endswith("/v1/messages") or not isinstance(body, Mapping):
            return None
        model = body.get("model") if isinstance(body.get("model"), str) else None
        tokens_in = text_tokens(body.get("system"), body.get("messages"), body.get("tools"))
        plan = Plan("anthropic.messages", model, PROVIDER, tokens_in, limit(body, "max_tokens"), "max_tokens")
        return plan, _MESSAGES


_slot = Instrumentation()


def _apply() -> Patches:
    stainless.load(
        _anthropic, "_base_client", "_streaming", "_response", "_legacy_response", "lib.tools._beta_runner"
    )
    sdk = stainless.SDK(_anthropic, _Endpoints())
    # MessageStream.close closes its raw Stream, which is patched: no helper classes needed.
    patches = stainless.patch(sdk, _anthropic, ())
    _tools.patch(_anthropic, patches)  # beta.messages.tool_runner: each tool run is a step
    return patches


def instrument() -> None:
    """Patch the Anthropic SDK (idempotent); see the module docstring."""
    _slot.install(_apply)


def uninstrument() -> None:
    """Restore the Anthropic SDK (idempotent); streams already open still settle."""
    _slot.remove()


def instrumented() -> bool:
    return _slot.active
