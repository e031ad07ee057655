"""Wrap ``call``/``acall`` of CrewAI LLM classes: the model calls no hook sees still count.

CrewAI runs its hooks only around the agent loop's own model call. The forced final answer at
``max_iter``, output conversion, planning and reasoning call ``llm.call`` directly. The wrapper
adopts the call a before hook already began (so it counts once) or begins one itself; it records
failures, and collects the call's token usage from ``BaseLLM._track_token_usage_internal``,
which every CrewAI provider calls with the raw usage of exactly this call (in this call's
context, so concurrent calls on one shared LLM instance never mix their usage).

Classes are patched, not instances (CrewAI copies LLM instances); each original is kept and put
back by :func:`unwrap_all`. Imported only after the CrewAI framework gate.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any

from crewai.llms.base_llm import BaseLLM
from crewai.types.usage_metrics import UsageMetrics

from .. import CallNode, ExecutionContext, TokenUsage
from . import _provider_claims
from ._crewai_calls import Call, begin, installed, llm_call, lock, raise_if_halted

_MARK = "__veronica_crewai__"
_originals: dict[tuple[type, str], tuple[Any, Any]] = {}  # (class, name) -> (original, wrapper)
_armed: dict[type, bool] = {}  # LLM class -> whether a ``call`` in its MRO is wrapped
_usage: ContextVar[list[Mapping[str, Any]] | None] = ContextVar("veronica_crewai_usage", default=None)
_tracking: ContextVar[bool] = ContextVar("veronica_crewai_tracking", default=False)


class _Run:
    """One model call through the wrapper: adopts or begins the Call, then settles it."""

    __slots__ = ("call", "usage", "_call_token", "_usage_token")

    @classmethod
    def start(cls, llm: Any, messages: Any = None) -> _Run | None:
        current = llm_call.get()
        if current is not None and current.state == "running":
            return None  # nested: an LLM implemented through another wrapped call
        if current is not None and current.state == "pending":
            return cls(current, own=False)  # begun by the before_llm_call hook
        call = begin("llm", "direct", llm, prompt=messages)  # raises CrewExecutionHalted at a limit
        return cls(call, own=True) if call is not None else None

    def __init__(self, call: Call, *, own: bool) -> None:
        call.state = "running"
        self.call = call
        self.usage: list[Mapping[str, Any]] = []
        self._call_token: Token[Call | None] | None = llm_call.set(call) if own else None
        self._usage_token = _usage.set(self.usage)

    def __enter__(self) -> _Run:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _usage.reset(self._usage_token)
        if self._call_token is not None:
            llm_call.reset(self._call_token)
        if isinstance(exc, Exception):
            self.call.fail(exc)  # draws one retry from the chain-wide budget
        elif exc is not None:
            self.call.commit(None)  # interrupted mid-call: the reservation counts as spent

    def finish(self, result: Any) -> None:
        self.call.commit(result, _sum_usage(self.usage))
        raise_if_halted()  # the actual cost may have crossed the budget: stop now


def _tokens(raw: Mapping[str, Any]) -> TokenUsage | None:
    if "inputTokens" in raw or "outputTokens" in raw:  # Bedrock's Converse API spells them so
        raw = {
            "prompt_tokens": raw.get("inputTokens"),
            "completion_tokens": raw.get("outputTokens"),
            "cached_tokens": raw.get("cacheReadInputTokens") or raw.get("cacheReadInputTokenCount"),
        }
    # CrewAI's own normaliser knows every provider's key names (prompt totals include cache).
    metrics = UsageMetrics.from_provider_dict(dict(raw))
    if metrics is None or not (metrics.prompt_tokens or metrics.completion_tokens):
        return None
    return TokenUsage(
        metrics.prompt_tokens,
        metrics.completion_tokens,
        metrics.cached_prompt_tokens,
        metrics.cache_creation_tokens,
    )


def _sum_usage(reports: list[Mapping[str, Any]]) -> TokenUsage | None:
    total: TokenUsage | None = None
    for raw in reports:
        part = _tokens(raw)
        if part is None:
            continue
        if total is None:
            total = part
        else:
            total = TokenUsage(
                total.input_tokens + part.input_tokens,
                total.output_tokens + part.output_tokens,
                total.cache_read_tokens + part.cache_read_tokens,
                total.cache_write_tokens + part.cache_write_tokens,
            )
    return total


def _enclosing_llm(ctx: ExecutionContext, kind: str) -> CallNode | None:
    """For the provider SDK instrumentation: the step of the CrewAI LLM call a request is sent in
    (CrewAI's native OpenAI/Anthropic providers call those SDKs inside ``call``), in ``ctx``."""
    call = llm_call.get() if kind == "llm" else None
    if call is None or call.state != "running":
        return None
    for node in call.nodes:
        if node.context is ctx:
            return node
    return None


_provider_claims.register(_enclosing_llm)


def _wrap_sync(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def call(llm: Any, *args: Any, **kwargs: Any) -> Any:
        run = _Run.start(llm, args[0] if args else kwargs.get("messages"))
        if run is None:
            return original(llm, *args, **kwargs)
        with run:
            result = original(llm, *args, **kwargs)
        run.finish(result)
        return result

    setattr(call, _MARK, True)
    return call


def _wrap_async(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def acall(llm: Any, *args: Any, **kwargs: Any) -> Any:
        run = _Run.start(llm, args[0] if args else kwargs.get("messages"))
        if run is None:
            return await original(llm, *args, **kwargs)
        with run:
            result = await original(llm, *args, **kwargs)
        run.finish(result)
        return result

    setattr(acall, _MARK, True)
    return acall


def _track_usage(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def track(llm: Any, usage_data: Any) -> Any:
        sink = _usage.get()
        if sink is None or _tracking.get():  # an override calling super(): recorded once
            return original(llm, usage_data)
        if isinstance(usage_data, Mapping):
            sink.append(usage_data)
        token = _tracking.set(True)
        try:
            return original(llm, usage_data)
        finally:
            _tracking.reset(token)

    setattr(track, _MARK, True)
    return track


def _patch(owner: type, name: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    original = vars(owner).get(name)
    if original is None or getattr(original, _MARK, False):
        return
    wrapper = wrap(original)
    _originals[(owner, name)] = (original, wrapper)
    setattr(owner, name, wrapper)


def _wrap_class(cls: type) -> bool:
    """Wrap ``call``/``acall`` (and the usage tracker) in each class of ``cls``'s MRO defining
    them (under ``lock``). BaseLLM's ``call``/``acall`` are an abstract method and a
    NotImplemented stub: left alone."""
    known = _armed.get(cls)
    if known is not None:
        return known
    wrapped = False
    for owner in cls.__mro__:
        if owner is BaseLLM or not issubclass(owner, BaseLLM):
            continue
        for name in ("call", "acall"):
            if name in vars(owner):
                is_async = inspect.iscoroutinefunction(vars(owner)[name])
                _patch(owner, name, _wrap_async if is_async else _wrap_sync)
                wrapped = wrapped or name == "call"
        _patch(owner, "_track_token_usage_internal", _track_usage)  # Bedrock overrides it
    _armed[cls] = wrapped
    return wrapped


def wrap_llm(llm: Any) -> bool:
    """Make sure the class of ``llm`` is wrapped (one defined or imported after install)."""
    known = _armed.get(type(llm))
    if known is not None:
        return known
    with lock:  # installed is checked so a late hook call cannot re-wrap after unwrap_all
        return bool(installed) and isinstance(llm, BaseLLM) and _wrap_class(type(llm))


def _subclasses(cls: type) -> list[type]:
    found: list[type] = []
    sub: type
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def wrap_all() -> None:
    """Wrap every LLM class known now, and the usage tracker (called under ``lock``)."""
    _patch(BaseLLM, "_track_token_usage_internal", _track_usage)
    for cls in _subclasses(BaseLLM):
        _wrap_class(cls)


def unwrap_all() -> None:
    """Put every original back (called under ``lock`` when the last instance uninstalls)."""
    for (owner, name), (original, wrapper) in _originals.items():
        if vars(owner).get(name) is wrapper:  # wrapped again on top of ours: left in place, inert
            setattr(owner, name, original)
    _originals.clear()
    _armed.clear()
