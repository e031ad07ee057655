"""LiteLLM instrumentation: every ``litellm.completion``/``acompletion`` inside a context is one step.

``veronica_mw.instrument("litellm")`` wraps ``litellm.completion`` and ``litellm.acompletion`` (the
module functions the Router and ``from litellm import completion`` use too) and the iteration of
LiteLLM's ``CustomStreamWrapper``. Inside a context each call is admitted before LiteLLM sends
anything — its worst case reserved from the messages and ``max_tokens``/``max_completion_tokens``
(times ``n``) at the model's prices — and settled with the usage of the ``ModelResponse``; a stream
stays LiteLLM's own object and is settled when it ends, is closed or its context ends (LiteLLM's
streams may never be garbage-collected). Refusing happens here, at the LiteLLM layer: LiteLLM turns
an exception raised inside its provider call into one of its own (``InternalServerError``), so a
halt further down is re-raised as the :class:`~veronica_mw.ExecutionHalted` it was. When LiteLLM
calls the OpenAI SDK, the OpenAI instrumentation adopts this step (one call, one step); a second
request under the same call (LiteLLM's retries and fallbacks) draws a retry. ``FitOutputToBudget``
lowers the ``max_tokens``/``max_completion_tokens`` keyword here (once: the OpenAI layer sends it
as fitted); a stream whose output passes its reservation is cut at the next read (partial output
delivered, then ``budget_exceeded``). Tested with litellm 1.x.
"""

from __future__ import annotations

from .. import MissingFrameworkError

try:
    import litellm as _litellm
    from litellm.litellm_core_utils.streaming_handler import CustomStreamWrapper
except ImportError as exc:
    raise MissingFrameworkError("litellm", "litellm", exc) from exc

from collections.abc import Mapping
from typing import Any

from .. import ExecutionContext, ExecutionHalted
from ..kernel.pricing import usage_from_mapping
from . import _provider_claims as claims
from . import _provider_streams as streams
from ._provider_calls import Outcome, Plan, ProviderCall, begin, context_now, limit, text_tokens
from ._provider_patch import Instrumentation, Patches

__all__ = ["instrument", "instrumented", "uninstrument"]

# LiteLLM provider prefixes -> genai-prices provider ids (others: looked up by model name alone).
_PROVIDERS = {
    "openai": "openai",
    "text-completion-openai": "openai",
    "anthropic": "anthropic",
    "gemini": "google",
    "vertex_ai": "google",
    "mistral": "mistral",
    "groq": "groq",
    "deepseek": "deepseek",
    "xai": "x-ai",
    "cohere": "cohere",
}


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _plan(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Plan:
    model = kwargs.get("model", args[0] if args else None)
    messages = kwargs.get("messages", args[1] if len(args) > 1 else None)
    name = model if isinstance(model, str) else None
    provider = kwargs.get("custom_llm_provider")
    if name is not None and "/" in name:
        prefix, rest = name.split("/", 1)
        if prefix in _PROVIDERS or provider is None:
            provider, name = prefix, rest
    n = kwargs.get("n")
    choices = n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1
    output = limit(kwargs, "max_completion_tokens", "max_tokens") * choices
    tokens_in = text_tokens(messages, kwargs.get("tools"), kwargs.get("functions"))
    # FitOutputToBudget lowers the keyword the caller set (LiteLLM maps either to the provider's).
    field = "max_tokens" if "max_tokens" in kwargs and "max_completion_tokens" not in kwargs else None
    return Plan(
        "litellm.completion",
        name,
        _PROVIDERS.get(str(provider)),
        tokens_in,
        output,
        field or "max_completion_tokens",
        choices,
    )


def _fitted(plan: Plan, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the output limit FitOutputToBudget lowered (a copy; the caller's is untouched)."""
    if plan.fitted is None or plan.limit_field is None:
        return kwargs
    return {**kwargs, plan.limit_field: plan.fitted}


def _outcome(response: Any) -> Outcome:
    chars = 0
    for choice in _get(response, "choices") or ():
        message = _get(choice, "message")
        content = _get(message, "content")
        chars += (len(content) if isinstance(content, str) else 0) + _tool_chars(_get(message, "tool_calls"))
    usage = _get(response, "usage")
    model = _get(response, "model")
    return (
        usage_from_mapping(usage) if usage is not None else None,
        model if isinstance(model, str) and model else None,
        chars,
    )


class _ChunkMeter(streams.Meter):
    """LiteLLM stream chunks (``ModelResponseStream``): OpenAI-shaped, usage on the last one only
    when the caller asked for it (``stream_options={"include_usage": True}``)."""

    __slots__ = ()

    def feed(self, chunk: Any) -> None:
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.tokens = usage_from_mapping(usage)
            self.final = self.tokens is not None
        if self.model is None:
            model = getattr(chunk, "model", None)
            self.model = model if isinstance(model, str) and model else None
        for choice in getattr(chunk, "choices", None) or ():
            delta = getattr(choice, "delta", None)
            content = getattr(delta, "content", None)
            self.chars += (len(content) if isinstance(content, str) else 0) + _tool_chars(
                getattr(delta, "tool_calls", None)
            )


def _tool_chars(tool_calls: Any) -> int:
    """Characters generated in tool calls (names and JSON arguments, whole or as stream deltas)."""
    chars = 0
    for tool_call in tool_calls or ():
        function = _get(tool_call, "function")
        for part in (_get(function, "name"), _get(function, "arguments")):
            chars += len(part) if isinstance(part, str) else 0
    return chars


def _halted_from(ctx: ExecutionContext, exc: BaseException) -> BaseException:
    """The exception to raise for ``exc``: the halt itself when LiteLLM wrapped one raised below."""
    if isinstance(exc, ExecutionHalted) or not isinstance(exc, Exception) or not ctx.aborted:
        return exc
    halted = ctx.halted_error()
    halted.__cause__ = exc
    return halted


def _returned(call: ProviderCall, result: Any) -> Any:
    if isinstance(result, CustomStreamWrapper):
        streams.watch(call, result, _ChunkMeter())
        return None
    return _outcome(result)


def _wrap_completion(original: Any) -> Any:
    def completion(*args: Any, **kwargs: Any) -> Any:
        ctx = context_now()
        if ctx is None or kwargs.get("acompletion"):  # acompletion() runs this too: counted there
            return original(*args, **kwargs)
        plan = _plan(args, kwargs)
        call = begin(ctx, plan)  # ExecutionHalted here: LiteLLM sent nothing
        try:
            with claims.offered(call.node):
                result = original(*args, **_fitted(plan, kwargs))
        except BaseException as exc:
            raised = _halted_from(ctx, exc)
            call.failed(raised)
            if raised is exc:
                raise
            raise raised from exc
        outcome = _returned(call, result)
        if outcome is not None:
            call.finish(outcome, result)
        return result

    return completion


def _wrap_acompletion(original: Any) -> Any:
    async def acompletion(*args: Any, **kwargs: Any) -> Any:
        ctx = context_now()
        if ctx is None:
            return await original(*args, **kwargs)
        plan = _plan(args, kwargs)
        call = begin(ctx, plan)
        try:
            with claims.offered(call.node):
                result = await original(*args, **_fitted(plan, kwargs))
        except BaseException as exc:
            raised = _halted_from(ctx, exc)
            call.failed(raised)
            if raised is exc:
                raise
            raise raised from exc
        outcome = _returned(call, result)
        if outcome is not None:
            await call.afinish(outcome, result)
        return result

    return acompletion


def _wrap_next(original: Any) -> Any:
    def __next__(self: Any) -> Any:
        pending = streams.watched(self)
        if pending is None:
            return original(self)
        if pending.cut:  # the output reached its reservation: what came so far was delivered
            halted = pending.halt()
            self.close()
            raise halted
        pending.busy += 1
        try:
            item = original(self)
        except StopIteration:
            pending.end()
            raise
        except BaseException as exc:
            pending.error(exc)
            raised = _halted_from(pending.call.ctx, exc)  # a halt below, wrapped by LiteLLM
            if raised is exc:
                raise
            raise raised from exc
        finally:
            pending.busy -= 1
        pending.feed(item)
        return item

    return __next__


def _wrap_anext(original: Any) -> Any:
    async def __anext__(self: Any) -> Any:
        pending = streams.watched(self)
        if pending is None:
            return await original(self)
        if pending.cut:
            halted = pending.halt()
            await self.aclose()
            raise halted
        pending.busy += 1
        try:
            item = await original(self)
        except StopAsyncIteration:
            pending.end()
            raise
        except BaseException as exc:
            pending.error(exc)
            raised = _halted_from(pending.call.ctx, exc)
            if raised is exc:
                raise
            raise raised from exc
        finally:
            pending.busy -= 1
        pending.feed(item)
        return item

    return __anext__


def _wrap_close(original: Any) -> Any:
    def close(self: Any) -> Any:
        pending = streams.watched(self)
        if pending is not None and not pending.busy:  # LiteLLM closes itself at the end, from next()
            pending.stop()  # before LiteLLM marks it closed: its next() then ends "normally"
        return original(self)

    return close


def _wrap_aclose(original: Any) -> Any:
    async def aclose(self: Any) -> Any:
        pending = streams.watched(self)
        if pending is not None and not pending.busy:
            pending.stop()
        return await original(self)

    return aclose


_slot = Instrumentation()


def _apply() -> Patches:
    patches = Patches()
    main = getattr(_litellm, "main", None)
    for module in (_litellm, main):
        patches.wrap(module, "completion", _wrap_completion)
        patches.wrap(module, "acompletion", _wrap_acompletion)
    patches.wrap(CustomStreamWrapper, "__next__", _wrap_next)
    patches.wrap(CustomStreamWrapper, "__anext__", _wrap_anext)
    patches.wrap(CustomStreamWrapper, "close", _wrap_close)
    patches.wrap(CustomStreamWrapper, "aclose", _wrap_aclose)
    return patches


def instrument() -> None:
    """Patch LiteLLM (idempotent); see the module docstring."""
    _slot.install(_apply)


def uninstrument() -> None:
    """Restore LiteLLM (idempotent); streams already open still settle."""
    _slot.remove()


def instrumented() -> bool:
    return _slot.active
