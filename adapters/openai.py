"""OpenAI SDK instrumentation: every model request made inside an execution context is one step.

``veronica_mw.instrument("openai")`` (or any middleware, or ``veronica-mw run``) patches the SDK
once, process-wide; outside a context a call passes straight through. Inside one, each request to
``/chat/completions`` (``create``, ``stream=True``, ``parse``, ``.stream()``), ``/responses``
(``create``, ``stream``, ``parse``), ``/embeddings`` and ``/completions`` — sync or async, plain or
through ``.with_raw_response``/``.with_streaming_response`` — is admitted before it is sent, with
its worst case reserved (estimated prompt tokens plus ``max_completion_tokens``/``max_tokens``/
``max_output_tokens``, or the configured default, times ``n``), and settled with the usage the
API reported. The SDK's retries each draw one retry from ``max_retries_total``. Requests are
not changed (no ``stream_options`` is added, so a stream that reports no usage is settled with an
estimate from its text), except that a step a policy moved to a fallback model (``DowngradeAt``)
is sent with that ``model``. How the SDK is hooked: :mod:`._provider_stainless`. Tested with
openai 2.x and 3.x.
"""

from __future__ import annotations

from .. import MissingFrameworkError

try:
    import openai as _openai
except ImportError as exc:
    raise MissingFrameworkError("openai", "openai", exc) from exc

import importlib
from collections.abc import Mapping
from typing import Any

from ..kernel.pricing import TokenUsage, usage_from_mapping
from . import _provider_stainless as stainless
from ._provider_calls import Outcome, Plan, field, limit, text_tokens
from ._provider_patch import Instrumentation, Patches
from ._provider_streams import Meter

__all__ = ["instrument", "instrumented", "uninstrument"]

PROVIDER = "openai"  # genai-prices provider id; other providers are tried for unknown models


_get = field
# The field names of each SDK usage type (pydantic's ``model_fields`` is a property costing µs a read).
_usage_fields: dict[type, Any] = {}


def _fields(kind: type) -> Any:
    found = _usage_fields.get(kind)
    if found is None:
        found = getattr(kind, "model_fields", None) or {}
        if len(_usage_fields) < 1024:
            _usage_fields[kind] = found
    return found


def _model(obj: Any) -> str | None:
    model = _get(obj, "model")
    return model if isinstance(model, str) and model else None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _usage(obj: Any) -> TokenUsage | None:
    """The usage of a response or stream chunk. The SDK's usage objects are read by their own field
    names (a missing attribute on a pydantic model costs microseconds); dicts (raw JSON) generically."""
    raw = _get(obj, "usage")
    if raw is None:
        return None
    if isinstance(raw, Mapping):
        return usage_from_mapping(raw)
    fields = _fields(type(raw))
    if "prompt_tokens" in fields:  # chat completions, embeddings, legacy completions
        details = raw.prompt_tokens_details if "prompt_tokens_details" in fields else None
        cached = getattr(details, "cached_tokens", None) if details is not None else None
        output = raw.completion_tokens if "completion_tokens" in fields else 0
        return TokenUsage(_count(raw.prompt_tokens), _count(output), _count(cached))
    if "input_tokens" in fields:  # Responses API
        details = raw.input_tokens_details if "input_tokens_details" in fields else None
        cached = getattr(details, "cached_tokens", None) if details is not None else None
        return TokenUsage(_count(raw.input_tokens), _count(raw.output_tokens), _count(cached))
    return usage_from_mapping(raw)


# -- chat completions -----------------------------------------------------------------------------


def _length(value: Any) -> int:
    return len(value) if isinstance(value, str) else 0


def _tool_chars(tool_calls: Any) -> int:
    """Characters a model generated in tool calls (names and JSON arguments), whole or as deltas."""
    chars = 0
    for tool_call in tool_calls or ():
        function = _get(tool_call, "function")
        chars += _length(_get(function, "name")) + _length(_get(function, "arguments"))
    return chars


def _chat_outcome(result: Any) -> Outcome:
    chars = 0
    for choice in _get(result, "choices") or ():  # every choice (``n``) was generated and billed
        message = _get(choice, "message")
        chars += _length(_get(message, "content")) + _tool_chars(_get(message, "tool_calls"))
    return _usage(result), _model(result), chars


class _ChatMeter(Meter):
    __slots__ = ()

    def feed(self, chunk: Any) -> None:
        if getattr(chunk, "usage", None) is not None:  # only if asked for (stream_options.include_usage)
            self.tokens = _usage(chunk)
            self.final = self.tokens is not None
        if self.model is None:
            self.model = _model(chunk)
        for choice in getattr(chunk, "choices", None) or ():
            delta = getattr(choice, "delta", None)
            self.seen(getattr(delta, "content", None))
            tool_calls = getattr(delta, "tool_calls", None)
            if tool_calls:
                self.chars += _tool_chars(tool_calls)


# -- Responses API --------------------------------------------------------------------------------


def _responses_outcome(result: Any) -> Outcome:
    chars = 0
    for item in _get(result, "output") or ():
        if _get(item, "type") == "function_call":  # a tool call: its name and JSON arguments
            chars += _length(_get(item, "name")) + _length(_get(item, "arguments"))
        for part in _get(item, "content") or ():
            chars += _length(_get(part, "text"))
    return _usage(result), _model(result), chars


_FINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


class _ResponsesMeter(Meter):
    __slots__ = ()

    def feed(self, event: Any) -> None:
        kind = getattr(event, "type", None)
        if kind == "response.output_text.delta":
            self.seen(getattr(event, "delta", None))
        elif kind == "response.function_call_arguments.delta":
            self.counted(getattr(event, "delta", None))
        elif kind == "response.output_item.added":  # a function call's name comes with its item
            self.counted(getattr(getattr(event, "item", None), "name", None))
        elif kind in _FINAL_EVENTS or kind == "response.created":
            response = getattr(event, "response", None)
            self.model = _model(response) or self.model
            if kind in _FINAL_EVENTS:
                self.tokens = _usage(response)
                self.final = self.tokens is not None


# -- embeddings and legacy completions ------------------------------------------------------------


def _embeddings_outcome(result: Any) -> Outcome:
    return _usage(result), _model(result), 0


def _completions_outcome(result: Any) -> Outcome:
    chars = sum(len(_get(c, "text") or "") for c in (_get(result, "choices") or ()))
    return _usage(result), _model(result), chars


class _CompletionsMeter(_ChatMeter):
    __slots__ = ()

    def feed(self, chunk: Any) -> None:
        if getattr(chunk, "usage", None) is not None:
            self.tokens = _usage(chunk)
            self.final = self.tokens is not None
        self.model = self.model or _model(chunk)
        for choice in getattr(chunk, "choices", None) or ():
            self.seen(getattr(choice, "text", None))


class _NoStream(Meter):
    __slots__ = ()

    def feed(self, item: Any) -> None:
        pass


_CHAT = stainless.Endpoint(_chat_outcome, _ChatMeter)
_RESPONSES = stainless.Endpoint(_responses_outcome, _ResponsesMeter)
_EMBEDDINGS = stainless.Endpoint(_embeddings_outcome, _NoStream)
_COMPLETIONS = stainless.Endpoint(_completions_outcome, _CompletionsMeter)


class _Endpoints:
    """Which OpenAI requests are model requests, and what each may cost at most.

    The request's model and its reservation are computed here and only here (a downgrade that
    swaps the model must change both)."""

    def plan(self, options: Any) -> tuple[Plan, stainless.Endpoint] | None:
        request = stainless.post_body(options)
        if request is None:
            return None
        url, body = request
        model = body.get("model") if isinstance(body.get("model"), str) else None
        if url.endswith("/chat/completions"):
            return stainless.chat_plan(body, "openai.chat.completions", PROVIDER), _CHAT
        if url.endswith("/responses"):
            tokens_in = text_tokens(body.get("input"), body.get("instructions"), body.get("tools"))
            output = limit(body, "max_output_tokens")
            return Plan(
                "openai.responses", model, PROVIDER, tokens_in, output, "max_output_tokens"
            ), _RESPONSES
        if url.endswith("/embeddings"):
            return Plan("openai.embeddings", model, PROVIDER, text_tokens(body.get("input")), 0), _EMBEDDINGS
        if url.endswith("/completions"):
            n = stainless.choices(body)
            output = limit(body, "max_tokens") * n
            tokens_in = text_tokens(body.get("prompt"))
            return Plan(
                "openai.completions", model, PROVIDER, tokens_in, output, "max_tokens", n
            ), _COMPLETIONS
        return None


_HELPERS = (
    "lib.streaming.chat._completions.ChatCompletionStream",
    "lib.streaming.chat._completions.AsyncChatCompletionStream",
    "lib.streaming.responses._responses.ResponseStream",
    "lib.streaming.responses._responses.AsyncResponseStream",
)

_slot = Instrumentation()


def _helper(path: str) -> Any:
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(f"openai.{module}"), name, None)
    except ImportError:  # helper streams moved or absent in this version: Stream.close still settles
        return None


def _apply() -> Patches:
    stainless.load(_openai, "_base_client", "_streaming", "_response", "_legacy_response")
    sdk = stainless.SDK(_openai, _Endpoints())
    return stainless.patch(sdk, _openai, tuple(_helper(p) for p in _HELPERS))


def instrument() -> None:
    """Patch the OpenAI SDK (idempotent); see the module docstring."""
    _slot.install(_apply)


def uninstrument() -> None:
    """Restore the OpenAI SDK (idempotent); streams already open still settle."""
    _slot.remove()


def instrumented() -> bool:
    return _slot.active
