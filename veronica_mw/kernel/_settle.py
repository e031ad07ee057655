"""Settlement: the one way a call admitted in a context ends, and what it cost.

:func:`close` settles a node exactly once (later settles are no-ops), in every level of the
lineage, then in the budget parents; :func:`close_record` is the same rule for a plain context's
compact record. The coroutine versions await the budget parents' ``asettle``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from . import observer as _obs
from ._lineage import is_async, record_retry
from ._node import _UNSET, DEFERRED, FREE, HELD, CallNode
from ._state import ContextState
from ._validate import check_number
from .config import WrapOptions
from .exceptions import ExecutionHalted
from .pricing import extract_usage, price_usage, usage_from_mapping
from .reasons import Decision, HaltReason

_monotonic = time.monotonic
_NO_USAGE = (type(None), str, bytes, int, float, bool)  # results extract_usage never reads


def close(
    ctx: ContextState,
    node: CallNode,
    status: str,
    cost: float,
    *,
    refund_step: bool = False,
    result: Any = _UNSET,
    error: BaseException | None = None,
) -> bool | None:
    """Settle ``node``; whether the call took some level of the lineage past its ceiling (its cost
    is the last one: HALT), or None when it was settled already, by another hook."""
    own = ctx._ledger
    with own.lock:
        if node.status != "running":
            return None
        if node.key is not None:
            ctx._open_keys.pop(node.key, None)  # type: ignore[union-attr]
        reserved = node.reserved_usd
        gated = own.settle(reserved, cost, refund_step)
        node.cost_usd = cost
        ctx._graph.finish(node, status)  # type: ignore[union-attr]
        if result is not _UNSET:
            ctx._partial = result
        held = node._held
    node._ctx = None
    over = gated and ctx._cost_passed()  # False when the gate was only a soft limit
    for level in ctx._above:  # the ancestors: the same settle, one lock at a time
        with level._ledger.lock:
            gated = level._ledger.settle(reserved, cost, refund_step)
        if gated and level._cost_passed():
            over = True
            level._abort(HaltReason.BUDGET_EXCEEDED, _past(level))
    if held == HELD:  # a deferred settle is awaited by the async caller (see pay)
        for budget in ctx._budgets:
            budget.settle(reserved, cost)
    if refund_step and node._probe:
        ctx._breaker.release_probe()  # type: ignore[union-attr]
    if node._seen:
        _obs.notify(ctx._observers, "call_ended", ctx, node, error)
    return over


def close_record(
    ctx: ContextState, node_id: int, kind: str, options: WrapOptions, parent: int | None, result: Any
) -> Decision:
    """:func:`close` for a plain context's record; the node's settle when the result has usage to
    price or a layer below made the call's node meanwhile."""
    cost = options.cost_estimate_hint
    if options.cost_fn is not None or type(result) not in _NO_USAGE:
        found = record_cost(ctx, options, result)
        if found is None:
            return promote(ctx, node_id, kind, options, parent).commit(result)
        cost = found
    own = ctx._ledger
    lock = own.lock
    lock.acquire()  # not ``with``: the context-manager protocol doubles what a lock costs
    graph: Any = ctx._graph
    node = graph._live.pop(node_id, None) if graph._live else None
    if node is not None:  # a layer below took it as its node (graph.get): settle that one
        lock.release()
        return node.commit(result)  # type: ignore[no-any-return]
    try:
        gated = own.settle(options.cost_estimate_hint, cost, False)
        graph.close(node_id, kind, "ok", cost)
        ctx._partial = result
    finally:
        lock.release()
    if gated and ctx._cost_passed():
        past_ceiling(ctx)
        return Decision.HALT
    return Decision.ALLOW


def promote(
    ctx: ContextState, node_id: int, kind: str, options: WrapOptions, parent_id: int | None
) -> CallNode:
    """The node object of a call admitted as a record, settled as any node from now on."""
    with ctx._ledger.lock:
        node = ctx._graph.promote(  # type: ignore[union-attr]
            node_id, kind, options.operation_name or kind, parent_id, ctx._ledger.steps, options
        )
    node._ctx = ctx
    node._options = options
    return node


def _past(level: ContextState) -> str:
    ledger = level._ledger
    return f"actual cost took the total to {ledger.committed:.6f} > {level.config.max_cost_usd:g}"


def past_ceiling(ctx: ContextState) -> None:
    """A settle said the run is over: the call ran, and its cost took this context past its
    ceiling, or an ancestor past its own (that ancestor halted already; this one follows)."""
    if ctx._ledger.over_ceiling():
        ctx._abort(HaltReason.BUDGET_EXCEEDED, _past(ctx))
    elif ctx._up is not None:
        ctx._halted_above()


def actual_cost(
    ctx: ContextState, node: CallNode, result: Any, cost_usd: float | None, usage: Any, model: str | None
) -> float:
    """What the call cost: explicit, ``cost_fn``, usage (given, in the result, or reported by a
    layer below) priced, else the reserved hint."""
    options: WrapOptions = node._options
    if model:
        node.response_model = model
    if cost_usd is not None:
        return check_number("cost_usd", cost_usd)
    if options.cost_fn is not None:
        return _cost_fn(ctx, options.cost_fn, None if result is _UNSET else result, node.reserved_usd)
    tokens = usage_from_mapping(usage) if usage is not None else None
    model = model or node.model  # the requested model, or the fallback it was sent to
    if tokens is None and result is not _UNSET:
        tokens, found_model = extract_usage(result)
        if found_model and not node.response_model:
            node.response_model = found_model
        model = model or found_model
    if tokens is None and node.reported_usage is not None:
        tokens, reported_model = node.reported_usage
        model = model or reported_model
    if tokens is None:
        return node.reserved_usd
    node.tokens_in, node.tokens_out = tokens.input_tokens, tokens.output_tokens
    if model:
        node.model = model
        try:
            return price_usage(tokens, model, options.provider)
        except LookupError as exc:
            ctx.add_event("unpriced", f"{exc}; reserved hint kept", model=model)
            return node.reserved_usd
    ctx.add_event("unpriced", "usage reported without a model name; reserved hint kept")
    return node.reserved_usd


def _cost_fn(ctx: ContextState, cost_fn: Callable[[Any], float], result: Any, hint: float) -> float:
    try:
        return check_number("cost_fn(result)", cost_fn(result))
    except Exception as exc:  # a broken cost_fn must not lose the reservation
        ctx.add_event("cost_fn_failed", f"{type(exc).__name__}: {exc}; reserved hint kept")
        return hint


def record_cost(ctx: ContextState, options: WrapOptions, result: Any) -> float | None:
    """:func:`actual_cost` of a call without a node, or None when the result carries usage or a
    model name to price (the node does that)."""
    if options.cost_fn is not None:
        return _cost_fn(ctx, options.cost_fn, result, options.cost_estimate_hint)
    if type(result) in _NO_USAGE or extract_usage(result) == (None, None):
        return options.cost_estimate_hint
    return None


def fail(ctx: ContextState, node: CallNode, exc: BaseException | None) -> None:
    """The call raised: an error costs nothing and draws one retry; a halt inside it (a nested
    wrap, an adapter) is no failure, and the call did run: its reservation is kept as spent."""
    if isinstance(exc, ExecutionHalted):
        close(ctx, node, "halted", node.reserved_usd, error=exc)
        return
    if close(ctx, node, "error", 0.0, error=exc) is None:
        return
    if node._probe:
        ctx._breaker.record_failure()  # type: ignore[union-attr]
    if exc is not None:
        with suppress(AttributeError, TypeError):  # an exception type without a __dict__
            exc.__veronica_recorded__ = recorded_ids(ctx)  # type: ignore[attr-defined]
    record_retry(ctx, exc)


def interrupt(ctx: ContextState, node: CallNode, exc: BaseException | None = None) -> None:
    # Cancelled mid-call (asyncio.CancelledError, KeyboardInterrupt): the call may have cost
    # money, so the reservation is kept as spent rather than given back.
    close(ctx, node, "interrupted", node.reserved_usd, error=exc)


def recorded_ids(ctx: ContextState) -> str | tuple[str, ...]:
    """What marks a failure whose retry this context drew: its chain id, or -- nested, as the
    ancestors drew it too -- every chain id of the lineage (see RetryContainer)."""
    if not ctx._above:
        return ctx.chain_id
    return (ctx.chain_id, *(level.chain_id for level in ctx._above))


# -- the coroutine versions: the same sync step, the budget parents' settle awaited ---------------


def defer(ctx: ContextState, node: CallNode) -> bool:
    """Before an async caller runs a sync settle step: leave the budget parents' settle to it."""
    if node._held != HELD or not ctx._abudgets:
        return False
    with ctx._ledger.lock:
        if node._held != HELD:
            return False
        node._held = DEFERRED
    return True


async def pay(ctx: ContextState, node: CallNode) -> None:
    """After a :func:`defer` step: await the budget parents' settle, once, if the node is settled."""
    with ctx._ledger.lock:
        settled = node.status != "running"
        if node._held == DEFERRED:
            node._held = FREE if settled else HELD
        else:
            settled = False
    if settled:  # the parent makes its own I/O safe against cancellation
        for budget in ctx._budgets:
            if is_async(budget):
                await budget.asettle(node.reserved_usd, node.cost_usd)  # type: ignore[attr-defined]
            else:
                budget.settle(node.reserved_usd, node.cost_usd)


async def settled(ctx: ContextState, node: CallNode, step: Callable[[], Any]) -> Any:
    """Run the sync settle ``step``; await the budget parents' settle it left (even if it raises)."""
    if not defer(ctx, node):
        return step()
    try:
        return step()
    finally:
        await pay(ctx, node)


async def afail(ctx: ContextState, node: CallNode, exc: BaseException | None) -> None:
    await settled(ctx, node, lambda: fail(ctx, node, exc))


async def arelease(ctx: ContextState, node: CallNode, status: str) -> None:
    await settled(ctx, node, lambda: close(ctx, node, status, 0.0, refund_step=True))


async def ainterrupt(ctx: ContextState, node: CallNode, exc: BaseException) -> None:
    # Only a cancelled task may await here; a coroutine being closed (GeneratorExit) or a
    # KeyboardInterrupt settles synchronously.
    if not isinstance(exc, asyncio.CancelledError):
        interrupt(ctx, node, exc)
        return
    await settled(ctx, node, lambda: interrupt(ctx, node, exc))
