"""Groq SDK instrumentation: every chat completion request inside an execution context is one step.

``veronica_mw.instrument("groq")`` patches the SDK once, process-wide. The ``groq`` package is
Stainless-generated like ``openai`` and ``anthropic``, so it is hooked at the same points
(:mod:`._provider_stainless`): inside a context, each ``POST /openai/v1/chat/completions``
(``chat.completions.create``, plain or ``stream=True``, sync or async, raw or not) is admitted
before it is sent, with its worst case reserved (estimated prompt tokens plus
``max_completion_tokens``/``max_tokens``, or the configured default, times ``n``), and settled with
the usage Groq reported: in the response, or in a stream's last chunk (``x_groq.usage``, or
``usage`` when ``stream_options.include_usage`` asked for it). A stream that reports none is
settled with an estimate from its text. ``POST /openai/v1/embeddings`` is a step too; audio,
files, batches and models pass through. The SDK's retries each draw one retry from
``max_retries_total``. Priced with genai-prices under provider ``groq``. Tested with groq 1.x.
"""

from __future__ import annotations

from .. import MissingFrameworkError

try:
    import groq as _groq
except ImportError as exc:
    raise MissingFrameworkError("groq", "groq", exc) from exc

from collections.abc import Mapping
from typing import Any

from ..kernel.pricing import TokenUsage, usage_from_mapping
from . import _provider_stainless as stainless
from ._provider_calls import Outcome, Plan, text_tokens
from ._provider_patch import Instrumentation, Patches
from ._provider_streams import Meter

__all__ = ["instrument", "instrumented", "uninstrument"]

PROVIDER = "groq"  # genai-prices provider id


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _model(obj: Any) -> str | None:
    model = _get(obj, "model")
    return model if isinstance(model, str) and model else None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _tokens(raw: Any) -> TokenUsage | None:
    """A ``CompletionUsage`` (or its JSON dict) as token usage."""
    if raw is None:
        return None
    if isinstance(raw, Mapping):
        return usage_from_mapping(raw)
    details = _get(raw, "prompt_tokens_details")
    cached = _get(details, "cached_tokens") if details is not None else None
    return TokenUsage(
        _count(_get(raw, "prompt_tokens")), _count(_get(raw, "completion_tokens")), _count(cached)
    )


def _usage(obj: Any) -> TokenUsage | None:
    """The usage of a response or chunk: ``usage``, else Groq's ``x_groq.usage`` (its streams)."""
    usage = _tokens(_get(obj, "usage"))
    return usage if usage is not None else _tokens(_get(_get(obj, "x_groq"), "usage"))


def _length(value: Any) -> int:
    return len(value) if isinstance(value, str) else 0


def _tool_chars(tool_calls: Any) -> int:
    chars = 0
    for tool_call in tool_calls or ():
        function = _get(tool_call, "function")
        chars += _length(_get(function, "name")) + _length(_get(function, "arguments"))
    return chars


def _chat_outcome(result: Any) -> Outcome:
    chars = 0
    for choice in _get(result, "choices") or ():  # every choice (``n``) was generated and billed
        message = _get(choice, "message")
        chars += _length(_get(message, "content")) + _length(_get(message, "reasoning"))
        chars += _tool_chars(_get(message, "tool_calls"))
    return _usage(result), _model(result), chars


class _ChatMeter(Meter):
    __slots__ = ()

    def feed(self, chunk: Any) -> None:
        usage = _usage(chunk)
        if usage is not None:
            self.tokens = usage
            self.final = True
        if self.model is None:
            self.model = _model(chunk)
        for choice in _get(chunk, "choices") or ():
            delta = _get(choice, "delta")
            self.seen(_get(delta, "content"))
            self.counted(_get(delta, "reasoning"))
            self.chars += _tool_chars(_get(delta, "tool_calls"))


class _NoStream(Meter):
    __slots__ = ()

    def feed(self, item: Any) -> None:
        pass


def _embeddings_outcome(result: Any) -> Outcome:
    return _usage(result), _model(result), 0


_CHAT = stainless.Endpoint(_chat_outcome, _ChatMeter)
_EMBEDDINGS = stainless.Endpoint(_embeddings_outcome, _NoStream)


class _Endpoints:
    """Which Groq requests are model requests, and what each may cost at most."""

    def plan(self, options: Any) -> tuple[Plan, stainless.Endpoint] | None:
        request = stainless.post_body(options)
        if request is None:
            return None
        url, body = request
        model = body.get("model") if isinstance(body.get("model"), str) else None
        if url.endswith("/chat/completions"):
            return stainless.chat_plan(body, "groq.chat.completions", PROVIDER), _CHAT
        if url.endswith("/embeddings"):
            return Plan("groq.embeddings", model, PROVIDER, text_tokens(body.get("input")), 0), _EMBEDDINGS
        return None


_slot = Instrumentation()


def _apply() -> Patches:
    stainless.load(_groq, "_base_client", "_streaming", "_response", "_legacy_response")
    sdk = stainless.SDK(_groq, _Endpoints())
    return stainless.patch(sdk, _groq, ())


def instrument() -> None:
    """Patch the Groq SDK (idempotent); see the module docstring."""
    _slot.install(_apply)


def uninstrument() -> None:
    """Restore the Groq SDK (idempotent); streams already open still settle."""
    _slot.remove()


def instrumented() -> bool:
    return _slot.active
