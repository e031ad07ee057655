"""The one-call forms (``wrap_*``: a Decision; ``call_*``: the result, or ExecutionHalted; and their
coroutine versions): admission, the call, one settle (:func:`run`, :func:`arun`).

A *plain* context keeps these calls as compact records, not node objects (``admit(record=True)``,
``close_record``): a failure, a divergence or usage to price makes the node (``promote``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from . import _settle
from . import observer as _obs
from ._admission import abegin, admit, begin
from ._io import call_request, response_text
from ._node import CallNode, current_node
from ._settle import promote
from ._state import ContextState
from ._verdicts import ToolCall, agate, approve
from .config import WrapOptions
from .exceptions import ExecutionHalted
from .reasons import Decision

_get_node = current_node.get


def _refused(ctx: ContextState, decision: bool) -> Any:
    if decision:
        return Decision.HALT
    raise ctx.halted_error()


def run(
    ctx: ContextState,
    kind: str,
    fn: Callable[..., Any],
    args: Any,
    kwargs: Any,
    options: WrapOptions,
    decision: bool,
) -> Any:
    """``fn(*args, **kwargs)`` as one call: its Decision (``decision``) or its result."""
    if ctx._plain and not _obs._global:
        parent = _get_node()
        node: Any = admit(ctx, kind, options, None, parent, True)[0]
        if node.__class__ is int:
            token = current_node.set(node)
            try:
                result = fn(*args, **kwargs) if args or kwargs else fn()
            except BaseException as exc:  # an error draws a retry; an interruption keeps the hint
                settle = _settle.fail if isinstance(exc, Exception) else _settle.interrupt
                settle(ctx, promote(ctx, node, kind, options, parent), exc)
                if decision and isinstance(exc, ExecutionHalted):
                    return Decision.HALT
                raise
            finally:
                current_node.reset(token)
            outcome = _settle.close_record(ctx, node, kind, options, parent, result)
            return outcome if decision else result
    else:
        node = begin(ctx, kind, options, None, None, True)
    if node is None:
        return _refused(ctx, decision)
    # A halt found while settling (a failed output check) is a HALT decision, like any other;
    # OutputRejected propagates, so the caller's retry loop asks again.
    try:
        if node._gates and decision:  # a wrapped thunk: nothing to show or edit
            approve(ctx, node, None, False)
        elif node._gates:
            call = ToolCall(fn, args, kwargs)
            approve(ctx, node, call.arguments, call.editable)
            if node.edited_arguments is not None:
                args, kwargs = call.rebuild(node.edited_arguments)
        if node.io is not None and not decision:  # an observer keeps call bodies
            node.io["request"] = call_request(args, kwargs, node.model)  # already a clean copy
        result = _run(ctx, node, fn, args, kwargs)
        if node.io is not None:
            node.record_io(response_text=response_text(result))
        outcome = node.commit(result)
    except ExecutionHalted:
        if decision:
            return Decision.HALT
        raise
    return outcome if decision else result


def _run(ctx: ContextState, node: CallNode, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    token = current_node.set(node.node_id)
    try:
        return fn(*args, **kwargs)
    except BaseException as exc:
        (_settle.fail if isinstance(exc, Exception) else _settle.interrupt)(ctx, node, exc)
        raise
    finally:
        current_node.reset(token)


async def arun(
    ctx: ContextState,
    kind: str,
    fn: Callable[..., Any],
    args: Any,
    kwargs: Any,
    options: WrapOptions,
    decision: bool,
) -> Any:
    """:func:`run` for coroutine callers: ``fn`` may be async or return an awaitable (awaited)."""
    if ctx._plain and not _obs._global:
        parent = _get_node()
        node: Any = admit(ctx, kind, options, None, parent, True)[0]
        if node.__class__ is int:
            token = current_node.set(node)
            try:
                result = fn(*args, **kwargs)
                if inspect.isawaitable(result):
                    result = await result
            except BaseException as exc:  # an error draws a retry; an interruption keeps the hint
                settle = _settle.fail if isinstance(exc, Exception) else _settle.interrupt
                settle(ctx, promote(ctx, node, kind, options, parent), exc)
                if decision and isinstance(exc, ExecutionHalted):
                    return Decision.HALT
                raise
            finally:
                current_node.reset(token)
            outcome = _settle.close_record(ctx, node, kind, options, parent, result)
            return outcome if decision else result
    else:
        node = await abegin(ctx, kind, options, None, None, True)
    if node is None:
        return _refused(ctx, decision)
    try:
        if node._gates and decision:  # a wrapped thunk: nothing to show or edit
            await agate(ctx, node, None, False)
        elif node._gates:
            call = ToolCall(fn, args, kwargs)
            await agate(ctx, node, call.arguments, call.editable)
            if node.edited_arguments is not None:
                args, kwargs = call.rebuild(node.edited_arguments)
        if node.io is not None and not decision:
            node.io["request"] = call_request(args, kwargs, node.model)
        result = await _arun(ctx, node, fn, args, kwargs)
        if node.io is not None:
            node.record_io(response_text=response_text(result))
        outcome = await node.acommit(result)
    except ExecutionHalted:
        if decision:
            return Decision.HALT
        raise
    return outcome if decision else result


async def _arun(ctx: ContextState, node: CallNode, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    token = current_node.set(node.node_id)
    try:
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result
    except BaseException as exc:
        await (_settle.afail if isinstance(exc, Exception) else _settle.ainterrupt)(ctx, node, exc)
        raise
    finally:
        current_node.reset(token)
