"""Google GenAI (``google-genai``) instrumentation: every ``generateContent`` request is one step.

``veronica_mw.instrument("google-genai")`` wraps the per-request methods of ``client.models`` and
``client.aio.models`` (``Models._generate_content`` / ``_generate_content_stream`` and their async
twins). Everything that sends a request goes through them — ``generate_content``,
``generate_content_stream``, each request of automatic function calling and of automatic
continuation — so each request is one step, admitted before it is sent with its worst case
reserved (estimated prompt tokens plus ``config.max_output_tokens``, or the configured default) and
settled with its ``usage_metadata`` (thinking tokens are billed as output, cached tokens at the
cache price), priced for the model version it reports. A stream is the SDK's own generator,
metered on its way and settled when it ends, is closed, is abandoned or its context ends; a refused
stream request raises when iteration starts, which is when it would have been sent. An async
stream closed early (``await stream.aclose()``) settles its requests at once. Under
``FitOutputToBudget`` a request that does not fit is sent with a copy of its config whose
``max_output_tokens`` is lowered (``generationConfig.maxOutputTokens`` on the wire).

Automatic function calling: each Python tool the SDK runs between requests is a ``tool`` step,
admitted before it runs; a refused one ends the SDK's loop by raising the halt to the caller (see
:mod:`._google_genai_tools`). Tested with google-genai 3.x.
"""

from __future__ import annotations

from .. import MissingFrameworkError

try:
    from google.genai import _extra_utils
    from google.genai import models as _models
except ImportError as exc:
    raise MissingFrameworkError("google-genai", "google-genai", exc) from exc

from collections.abc import AsyncIterator, Mapping
from contextvars import ContextVar
from typing import Any

from ..kernel.pricing import TokenUsage
from . import _google_genai_tools as tools
from . import _provider_streams as streams
from ._provider_calls import Outcome, Plan, ProviderCall, begin, context_now, text_tokens
from ._provider_calls import limit as _limit
from ._provider_patch import Instrumentation, Patches

__all__ = ["instrument", "instrumented", "tokens", "uninstrument"]

PROVIDER = "google"
LIMIT_FIELD = "max_output_tokens"  # of the SDK's config; FitOutputToBudget may lower it


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def tokens(usage: Any) -> TokenUsage | None:
    """``usage_metadata`` as the kernel counts it: thinking tokens are output, cached ones cache reads."""
    if usage is None:
        return None
    prompt = _get(usage, "prompt_token_count")
    candidates = _get(usage, "candidates_token_count")
    if prompt is None and candidates is None:
        return None
    output = _count(candidates) + _count(_get(usage, "thoughts_token_count"))
    prompt_total = _count(prompt) + _count(_get(usage, "tool_use_prompt_token_count"))
    return TokenUsage(prompt_total, output, _count(_get(usage, "cached_content_token_count")))


def _text_chars(response: Any) -> int:
    chars = 0
    for candidate in _get(response, "candidates") or ():
        for part in _get(_get(candidate, "content"), "parts") or ():
            text = _get(part, "text")
            chars += len(text) if isinstance(text, str) else 0
    return chars


def _outcome(response: Any) -> Outcome:
    model = _get(response, "model_version")
    return (
        tokens(_get(response, "usage_metadata")),
        model if isinstance(model, str) else None,
        _text_chars(response),
    )


class _Meter(streams.Meter):
    """Stream chunks carry cumulative ``usage_metadata``; the last one (with a finish reason) is final."""

    __slots__ = ()

    def feed(self, chunk: Any) -> None:
        usage = tokens(getattr(chunk, "usage_metadata", None))
        if usage is not None:
            self.tokens = usage
        model = getattr(chunk, "model_version", None)
        if isinstance(model, str) and model:
            self.model = model
        self.chars += _text_chars(chunk)
        for candidate in getattr(chunk, "candidates", None) or ():
            if getattr(candidate, "finish_reason", None) is not None and self.tokens is not None:
                self.final = True


def _plan(kwargs: Mapping[str, Any]) -> Plan:
    model = kwargs.get("model")
    name = model.rsplit("/", 1)[-1] if isinstance(model, str) else None  # "models/gemini-2.0-flash"
    config = kwargs.get("config")
    limits: dict[str, Any] = (
        {"max_output_tokens": _get(config, "max_output_tokens")} if config is not None else {}
    )
    candidates = _get(config, "candidate_count") if config is not None else None
    n = (
        candidates
        if isinstance(candidates, int) and not isinstance(candidates, bool) and candidates > 1
        else 1
    )
    extra = (_get(config, "system_instruction"), _get(config, "tools")) if config is not None else ()
    tokens_in = text_tokens(kwargs.get("contents"), *extra)
    output = _limit(limits, "max_output_tokens") * n
    return Plan("google_genai.generate_content", name, PROVIDER, tokens_in, output, LIMIT_FIELD, n)


def _fitted(plan: Plan, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with ``config.max_output_tokens`` lowered by FitOutputToBudget (the SDK sends it
    as ``generationConfig.maxOutputTokens``); the caller's config is copied, never changed."""
    if plan.fitted is None:
        return kwargs
    config = kwargs.get("config")
    if config is None:
        lowered: Any = {LIMIT_FIELD: plan.fitted}
    elif isinstance(config, Mapping):
        lowered = {**config, LIMIT_FIELD: plan.fitted}
    else:  # a GenerateContentConfig (pydantic)
        lowered = config.model_copy(update={LIMIT_FIELD: plan.fitted})
    return {**kwargs, "config": lowered}


def _wrap_generate(original: Any) -> Any:
    def _generate_content(self: Any, **kwargs: Any) -> Any:
        ctx = context_now()
        if ctx is None:
            return original(self, **kwargs)
        plan = _plan(kwargs)
        call = begin(ctx, plan)
        try:
            response = original(self, **_fitted(plan, kwargs))
        except BaseException as exc:
            call.failed(exc)
            raise
        call.finish(_outcome(response), response)
        return response

    return _generate_content


def _wrap_agenerate(original: Any) -> Any:
    async def _generate_content(self: Any, **kwargs: Any) -> Any:
        ctx = context_now()
        if ctx is None:
            return await original(self, **kwargs)
        plan = _plan(kwargs)
        call = begin(ctx, plan)
        try:
            response = await original(self, **_fitted(plan, kwargs))
        except BaseException as exc:
            call.failed(exc)
            raise
        await call.afinish(_outcome(response), response)
        return response

    return _generate_content


# The metered requests of the async stream being iterated (see _closing).
_opened: ContextVar[list[Any] | None] = ContextVar("veronica_genai_opened", default=None)


def _observed(call: ProviderCall, stream: Any) -> Any:
    observed = streams.metered(call, stream, _Meter())
    opened = _opened.get()
    if opened is not None:
        opened.append(observed)
    return observed


async def _closing(outer: Any) -> AsyncIterator[Any]:
    """The caller's async stream: ``outer`` (the SDK's generator) item by item, settling the
    requests it opened as soon as it is closed. The SDK's own generators in between would only
    be finalized later by the event loop, so closing the outer one alone left them unsettled."""
    opened: list[Any] = []
    try:
        while True:
            token = _opened.set(opened)
            try:
                chunk = await outer.__anext__()
            except StopAsyncIteration:
                return
            finally:
                _opened.reset(token)
            yield chunk
    finally:
        await outer.aclose()
        for observed in opened:
            await observed.aclose()  # settled already when it ended; else charged now


def _wrap_stream(original: Any) -> Any:
    # Called when the caller's stream generator starts (SDK generators run lazily): the request
    # is sent on the first next() of ``original``'s generator, right after this admission.
    def _generate_content_stream(self: Any, **kwargs: Any) -> Any:
        ctx = context_now()
        if ctx is None:
            return original(self, **kwargs)
        plan = _plan(kwargs)
        call = begin(ctx, plan)
        return _observed(call, original(self, **_fitted(plan, kwargs)))

    return _generate_content_stream


def _wrap_astream(original: Any) -> Any:
    async def _generate_content_stream(self: Any, **kwargs: Any) -> Any:
        ctx = context_now()
        if ctx is None:
            return await original(self, **kwargs)
        plan = _plan(kwargs)
        call = begin(ctx, plan)
        try:
            stream = await original(self, **_fitted(plan, kwargs))  # the request is sent here
        except BaseException as exc:
            call.failed(exc)
            raise
        return _observed(call, stream)

    return _generate_content_stream


def _wrap_public_astream(original: Any) -> Any:
    async def generate_content_stream(self: Any, *args: Any, **kwargs: Any) -> Any:
        stream = await original(self, *args, **kwargs)
        if context_now() is None or not hasattr(stream, "__anext__"):
            return stream
        return _closing(stream)

    return generate_content_stream


_slot = Instrumentation()


def _apply() -> Patches:
    patches = Patches()
    sync_models = getattr(_models, "Models", None)
    async_models = getattr(_models, "AsyncModels", None)
    patches.wrap(sync_models, "_generate_content", _wrap_generate)
    patches.wrap(sync_models, "_generate_content_stream", _wrap_stream)
    patches.wrap(async_models, "_generate_content", _wrap_agenerate)
    patches.wrap(async_models, "_generate_content_stream", _wrap_astream)
    patches.wrap(async_models, "generate_content_stream", _wrap_public_astream)
    # Automatic function calling: the SDK runs the Python tools itself (see _google_genai_tools).
    patches.wrap(_extra_utils, "invoke_function_from_dict_args", tools.wrap_invoke)
    patches.wrap(_extra_utils, "invoke_function_from_dict_args_async", tools.wrap_ainvoke)
    patches.wrap(_extra_utils, "get_function_response_parts", tools.wrap_parts)
    patches.wrap(_extra_utils, "get_function_response_parts_async", tools.wrap_aparts)
    return patches


def instrument() -> None:
    """Patch google-genai (idempotent); see the module docstring."""
    _slot.install(_apply)


def uninstrument() -> None:
    """Restore google-genai (idempotent); streams already open still settle."""
    _slot.remove()


def instrumented() -> bool:
    return _slot.active
