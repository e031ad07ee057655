"""LangGraph adapter: every node execution is one kernel step.

:func:`veronica_node` wraps one node function (sync stays sync, async stays async);
:func:`veronica_graph` wraps every node of a ``StateGraph`` builder before ``compile()``.

A halt raises :class:`~veronica_mw.ExecutionHalted` before the node body runs. It is a
``RuntimeError``, which LangGraph's default ``RetryPolicy`` does not retry, and even a policy that
retries everything cannot run the body again: the halted context refuses every later step. Node
functions run in threads (parallel branches) and tasks (async nodes) with a copy of the caller's
context, so the current execution context is found there too.

A step begun here is offered to the first LangChain run *of the same kind* inside the node (see
:mod:`._langchain_claims`): mark a node that makes one model call ``kind="llm"`` and, with the
LangChain adapter imported, that call is the node's step rather than a second one.
"""

from __future__ import annotations

try:
    from langgraph.errors import GraphBubbleUp
    from langgraph.graph import StateGraph
    from langgraph.pregel.protocol import PregelProtocol
except ImportError as _exc:
    from .. import MissingFrameworkError

    raise MissingFrameworkError("langgraph", "langgraph", _exc) from None

import asyncio
import copy
import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, overload

from langchain_core.runnables import RunnableConfig, RunnableLambda

from .. import CallNode, ContextBinding, ExecutionConfig, ExecutionContext, WrapOptions
from ._langchain_claims import claimed

__all__ = ["veronica_graph", "veronica_node"]

F = TypeVar("F", bound=Callable[..., Any])
_MARK = "__veronica_node__"


def _check_kind(kind: str) -> str:
    if kind not in ("llm", "tool"):
        raise ValueError(f"kind must be 'llm' or 'tool', got {kind!r}")
    return kind


def _settle_error(node: CallNode, exc: BaseException) -> None:
    if isinstance(exc, GraphBubbleUp):
        node.commit()  # interrupt() or Command(graph=PARENT): the node ran, nothing failed
    elif isinstance(exc, Exception):
        node.fail(exc)  # recorded, draws one retry; an inner ExecutionHalted is kept as a halt
    else:
        node.commit(cost_usd=node.reserved_usd)  # cancelled mid-run: keep the reservation as spent


async def _asettle_error(node: CallNode, exc: BaseException) -> None:
    # Like _settle_error, awaiting an async budget parent; a coroutine being closed cannot await.
    if isinstance(exc, GraphBubbleUp):
        await node.acommit()
    elif isinstance(exc, Exception):
        await node.afail(exc)
    elif isinstance(exc, asyncio.CancelledError):
        await node.acommit(cost_usd=node.reserved_usd)
    else:
        _settle_error(node, exc)


def _is_async(fn: Any) -> bool:
    # Callable objects count as async when their __call__ is a coroutine function (as in LangGraph).
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def _wrap(fn: Callable[..., Any], kind: str, name: str, binding: ContextBinding) -> Callable[..., Any]:
    if getattr(fn, _MARK, False):
        return fn  # already a step: wrapping twice would count it twice
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(f"veronica_node cannot wrap generator node {name!r}; wrap a regular function")
    options = WrapOptions(operation_name=name)

    if _is_async(fn):

        @functools.wraps(fn)
        async def async_step(*args: Any, **kwargs: Any) -> Any:
            ctx = binding.resolve()
            if ctx is None:
                return await fn(*args, **kwargs)
            node = await ctx.abegin_call(kind, options)  # ExecutionHalted here: the body never runs
            try:
                with claimed(ctx, node):
                    result = await fn(*args, **kwargs)
            except BaseException as exc:
                await _asettle_error(node, exc)
                raise
            await node.acommit(result)
            return result

        setattr(async_step, _MARK, True)
        return async_step

    @functools.wraps(fn)
    def step(*args: Any, **kwargs: Any) -> Any:
        ctx = binding.resolve()
        if ctx is None:
            return fn(*args, **kwargs)
        node = ctx.begin_call(kind, options)
        try:
            with claimed(ctx, node):
                result = fn(*args, **kwargs)
        except BaseException as exc:
            _settle_error(node, exc)
            raise
        node.commit(result)
        return result

    setattr(step, _MARK, True)
    return step


@overload
def veronica_node(
    fn: F,
    *,
    kind: str = "tool",
    name: str | None = None,
    context: ExecutionContext | None = None,
    config: ExecutionConfig | None = None,
    on_limit: Any = None,
) -> F: ...


@overload
def veronica_node(
    fn: None = None,
    *,
    kind: str = "tool",
    name: str | None = None,
    context: ExecutionContext | None = None,
    config: ExecutionConfig | None = None,
    on_limit: Any = None,
) -> Callable[[F], F]: ...


def veronica_node(
    fn: Callable[..., Any] | None = None,
    *,
    kind: str = "tool",
    name: str | None = None,
    context: ExecutionContext | None = None,
    config: ExecutionConfig | None = None,
    on_limit: Any = None,
) -> Any:
    """Run each execution of a LangGraph node function as one step of ``kind`` ("tool" or "llm").

    Use as ``@veronica_node``, ``@veronica_node(kind="llm")`` or ``veronica_node(fn)``. The
    signature (and so LangGraph's ``config``/``runtime`` injection and schema inference) is kept;
    async functions stay coroutine functions. Binding: ``context``, else the current context,
    else one context owned by this wrapper built from ``config``, else the node runs uncontained.
    """
    _check_kind(kind)
    binding = ContextBinding(context, config, on_limit)

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        node_name = name or getattr(func, "__name__", None) or type(func).__name__
        return _wrap(func, kind, node_name, binding)

    return decorate if fn is None else decorate(fn)


def _wrap_runnable(runnable: Any, kind: str, name: str, binding: ContextBinding) -> Any:
    if isinstance(runnable, PregelProtocol):
        # A compiled subgraph must stay visible to LangGraph (checkpoint namespaces, streaming);
        # contain it by wrapping its own builder's nodes instead.
        return runnable
    func, afunc = getattr(runnable, "func", None), getattr(runnable, "afunc", None)
    if hasattr(runnable, "func_accepts") and (func is not None or afunc is not None):
        # LangGraph's function node (also ToolNode): swap in wrapped functions on a copy; the
        # signature-based injection it computed at construction still holds (same signature).
        wrapped = copy.copy(runnable)
        wrapped.func = _wrap(func, kind, name, binding) if func is not None else None
        wrapped.afunc = _wrap(afunc, kind, name, binding) if afunc is not None else None
        return wrapped

    # Any other Runnable (a chat model, a RunnableLambda for a generator node, ...).
    def call(state: Any, config: RunnableConfig) -> Any:
        return runnable.invoke(state, config)

    async def acall(state: Any, config: RunnableConfig) -> Any:
        return await runnable.ainvoke(state, config)

    return RunnableLambda(_wrap(call, kind, name, binding), _wrap(acall, kind, name, binding), name=name)


def veronica_graph(
    builder: StateGraph[Any, Any, Any, Any],
    *,
    kind: str = "tool",
    kinds: Mapping[str, str] | None = None,
    context: ExecutionContext | None = None,
    config: ExecutionConfig | None = None,
    on_limit: Any = None,
) -> StateGraph[Any, Any, Any, Any]:
    """Wrap every node already added to ``builder`` (call it before ``compile()``); returns ``builder``.

    Each node execution becomes one step of ``kinds.get(node, kind)``. All nodes share one binding,
    so with ``config`` they share one owned context. Error-handler nodes are wrapped too, so a halt
    cannot be "recovered" by them. Compiled subgraph nodes are left as they are (wrap their
    builders); nodes already wrapped with :func:`veronica_node` are not wrapped twice.
    """
    if not isinstance(builder, StateGraph):
        raise TypeError(
            f"veronica_graph needs a StateGraph builder (not compiled), got {type(builder).__name__}"
        )
    _check_kind(kind)
    overrides = {node: _check_kind(k) for node, k in (kinds or {}).items()}
    unknown = set(overrides) - set(builder.nodes)
    if unknown:
        raise ValueError(f"kinds names unknown nodes: {sorted(unknown)}")
    binding = ContextBinding(context, config, on_limit)
    for node_name, spec in list(builder.nodes.items()):
        wrapped = _wrap_runnable(spec.runnable, overrides.get(node_name, kind), node_name, binding)
        if wrapped is not spec.runnable:
            builder.nodes[node_name] = dataclasses.replace(spec, runnable=wrapped)
    # The builder-wide error handler only becomes a node at compile(); wrap it now so that, once
    # the context has halted, it re-raises the halt instead of recovering from it (a failing error
    # handler fails the run). Guarded: this is builder state, not public API.
    defaults = getattr(builder, "_node_defaults", None)
    handler = getattr(defaults, "error_handler", None)
    if callable(handler) and not isinstance(handler, PregelProtocol) and not hasattr(handler, "invoke"):
        defaults.error_handler = _wrap(handler, kind, "__default_error_handler__", binding)  # type: ignore[union-attr]
    return builder
