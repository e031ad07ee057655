"""Admission: the one way a call enters a context -- root or nested, sync or async, node or record.

The locks of the lineage are taken root first, so two threads can never deadlock; a call reserves
in every level or in none. :func:`abegin` differs from :func:`begin` only in awaiting the budget
parents (:func:`ahold`)."""

from __future__ import annotations

import time
from typing import Any

from . import _escalate, _lineage, _settle
from . import observer as _obs
from ._ledger import EPSILON
from ._node import HELD, CallNode, current_node
from ._state import ContextState
from ._verdicts import fallback_hint
from .config import WrapOptions
from .policy import PolicyContext
from .reasons import HaltReason

_monotonic = time.monotonic
_get_node = current_node.get
_REFUSED: tuple[None, bool] = (None, False)


def _clear(
    ctx: ContextState, level: ContextState, kind: str, name: str, hint: float, options: WrapOptions
) -> str | None | bool:
    """``level``'s deadline, halt and policies on the call: False when it is refused (and ``ctx``
    halted), else the model a policy downgrades it to (None: none)."""
    ledger = level._ledger
    if ledger.reason is None and level._deadline and _monotonic() >= level._deadline:
        level._on_deadline()
    if ledger.reason is not None:
        ctx._inherit(level)  # no-op for ``ctx`` itself
        return False
    pipeline = level._pipeline
    if pipeline is None:
        return None
    decision = pipeline.evaluate(PolicyContext(
        cost_usd=ledger.committed, step_count=ledger.steps, retries_used=ledger.retries,
        cost_estimate_usd=hint, kind=kind, operation_name=name, chain_id=level.chain_id,
        max_cost_usd=level.config.max_cost_usd,
    ))  # fmt: skip
    if not decision.allowed:
        wait = decision.rate_limit_ms / 1000.0 if decision.rate_limit_ms else None
        level._abort(HaltReason.POLICY_DENIED, f"{decision.policy_type}: {decision.reason}", wait)
        ctx._inherit(level)
        return False
    if decision.fallback_model is not None and kind == "llm" and decision.fallback_model != options.model:
        return decision.fallback_model
    return None


def admit(
    ctx: ContextState, kind: str, options: WrapOptions, key: Any, parent_id: int | None, record: bool
) -> tuple[CallNode | int | None, Any]:
    """Every check and the reservation: (the node, or with ``record`` its id; whether new). ``(None,
    False)`` is a refusal (the context halted), ``(None, ask)`` one a level's on_limit may lift (see
    :mod:`._escalate`); an open node of the same ``key`` is returned as is."""
    if kind != "llm" and kind != "tool":
        raise ValueError(f"kind must be 'llm' or 'tool', got {kind!r}")
    own = ctx._ledger
    if own.reason is not None:
        return _REFUSED
    hint = options.cost_estimate_hint
    name = options.operation_name or kind
    fallback: Any = None
    above = ctx._above
    if above:  # root first; a root has no ancestors
        for level in reversed(above):
            found = _clear(ctx, level, kind, name, hint, options)
            if found is False:
                return _REFUSED
            fallback = found or fallback  # the nearest level's downgrade wins
    if ctx._deadline or ctx._pipeline is not None:
        found = _clear(ctx, ctx, kind, name, hint, options)
        if found is False:
            return _REFUSED
        fallback = found or fallback
    if fallback is not None:  # MODIFY: the call runs on the fallback, reserved at its price
        hint = fallback_hint(hint, options, fallback)
    if parent_id is None:
        parent_id = _get_node()
    levels = ctx._levels
    refused: Any = None
    node: Any = None
    for ledger in ctx._down:  # root first
        ledger.lock.acquire()  # not ``with``: the context-manager protocol doubles what a lock costs
    try:
        if key is not None:
            if ctx._open_keys is None:
                ctx._open_keys = {}
            existing = ctx._open_keys.get(key)
            if existing is not None:
                return existing, False
        priced = kind == "llm" or hint > 0.0
        for ledger in levels:
            # The rule, for every level: not halted, a step left, and (for a model call, or any call
            # with a hint) the hint fits and some budget is left. Written out: every call runs it.
            config = ledger.config
            if (
                ledger.reason is not None
                or ledger.steps >= config.max_steps
                or priced
                and (
                    ledger.committed + ledger.reserved + hint > config.max_cost_usd + EPSILON
                    or (kind == "llm" and ledger.committed + EPSILON >= config.max_cost_usd)
                )
            ):
                i = levels.index(ledger)
                refusal = ledger.refusal(kind, hint)  # on_limit: claimed under the lock (one ask)
                refused = (i, refusal, None if record else _escalate.claim(ctx, i, refusal))
                break
        else:
            for ledger in levels:
                ledger.steps += 1
                ledger.reserved += hint
                ledger.in_flight += 1
            graph = ctx._graph or ctx._graph_locked()
            if record:
                node, repeats = graph.open(kind, name, parent_id, own.steps, options)
            else:
                node, repeats = graph.add(kind, name, parent_id)
                node._ctx = ctx
                node._options = options
                node.reserved_usd = hint
                node.model = options.model
                node.step = own.steps
                if fallback is not None:
                    node.fallback_model = fallback
                if key is not None:
                    node.key = key
                    ctx._open_keys[key] = node  # type: ignore[index]
    finally:
        for ledger in levels:
            ledger.lock.release()
    if refused is not None:
        if refused[2] is not None:
            return None, refused[2]  # begin asks for more outside the locks, then admits again
        _lineage.refuse(ctx, refused[0], refused[1])
        return _REFUSED
    if own.steps > own.step_gate:  # the step limit, or a soft limit before it: warn
        ctx._soft_limit("steps")
    for level in above:
        if level._ledger.steps > level._ledger.step_gate:
            level._soft_limit("steps")
    if repeats == ctx._graph_args[1]:
        if record:
            node = _settle.promote(ctx, node, kind, options, parent_id)
        if diverged(ctx, node):
            return _REFUSED
    breaker = ctx._breaker
    if breaker is not None:
        decision = breaker.check(None)
        if not decision.allowed:
            _settle.close(ctx, node, "refused", 0.0, refund_step=True)
            wait = decision.rate_limit_ms / 1000.0 if decision.rate_limit_ms else None
            ctx._abort(HaltReason.CIRCUIT_OPEN, decision.reason, wait)
            return _REFUSED
        node._probe = True
    return node, True


def diverged(ctx: ContextState, node: CallNode) -> bool:
    """The same call signature repeated ``divergence_threshold`` times in a row: an event, and a
    halt with ``halt_on_divergence``."""
    detail = f"{node.kind}:{node.name} repeated {ctx._graph_args[1]} times in a row"
    ctx.add_event("divergence", detail, call_kind=node.kind, name=node.name)
    if not ctx._halt_on_divergence:
        return False
    _settle.close(ctx, node, "refused", 0.0, refund_step=True)
    ctx._abort(HaltReason.POLICY_DENIED, f"divergence: {detail}")
    return True


def _refused_by(ctx: ContextState, node: CallNode, taken: list[Any], budget: Any) -> None:
    for held in taken:
        held.settle(node.reserved_usd, 0.0)
    _settle.close(ctx, node, "refused", 0.0, refund_step=True)
    _lineage.budget_refused(ctx, budget)


def hold(ctx: ContextState, node: CallNode) -> bool:
    """Reserve the call's hint in every budget parent (a tenant pool), or in none."""
    taken: list[Any] = []
    for budget in ctx._budgets:
        if not budget.reserve(node.reserved_usd):
            _refused_by(ctx, node, taken, budget)
            return False
        taken.append(budget)
    node._held = HELD
    return True


async def ahold(ctx: ContextState, node: CallNode) -> bool:
    """:func:`hold`, awaiting the budget parents that answer over I/O."""
    taken: list[Any] = []
    for budget in ctx._budgets:
        try:
            if _lineage.is_async(budget):
                allowed = await budget.areserve(node.reserved_usd)  # type: ignore[attr-defined]
            else:
                allowed = budget.reserve(node.reserved_usd)
        except BaseException:
            # Cancelled while the pool answered: the call never runs (the pool gives back a
            # reservation it made meanwhile).
            for held in taken:
                held.settle(node.reserved_usd, 0.0)
            _settle.close(ctx, node, "refused", 0.0, refund_step=True)
            raise
        if not allowed:
            _refused_by(ctx, node, taken, budget)
            return False
        taken.append(budget)
    node._held = HELD
    return True


def announce(ctx: ContextState, node: CallNode, inline: bool) -> None:
    """A new node that passed every check: its approval gates (every level's policies gate the
    tools of the contexts nested in it too), and the observers."""
    if node.kind == "tool":
        gates = tuple(
            gate
            for level in (*reversed(ctx._above), ctx)
            if level._pipeline is not None
            for gate in level._pipeline.gates
            if gate.gates(node.name)
        )
        if gates:
            node._gates = gates  # asked by begin_call before the tool runs (see _verdicts.approve)
    if _obs._global or ctx._observers:
        node._seen = True
        node.inline = inline
        if node.kind == "llm" and _obs.wants_bodies(ctx._observers):
            node.io = {}
        _obs.notify(ctx._observers, "call_started", ctx, node)


def begin(
    ctx: ContextState, kind: str, options: WrapOptions, key: Any, parent_id: int | None, inline: bool
) -> CallNode | None:
    node, fresh = admit(ctx, kind, options, key, parent_id, False)
    while node is None and fresh and fresh[1]._on_limit.ask(fresh):  # on_limit granted more
        node, fresh = admit(ctx, kind, options, key, parent_id, False)
    if node is None or not fresh:
        return node  # type: ignore[return-value]
    if ctx._budgets and not hold(ctx, node):  # type: ignore[arg-type]
        return None
    announce(ctx, node, inline)  # type: ignore[arg-type]
    return node  # type: ignore[return-value]


async def abegin(
    ctx: ContextState, kind: str, options: WrapOptions, key: Any, parent_id: int | None, inline: bool
) -> CallNode | None:
    node, fresh = admit(ctx, kind, options, key, parent_id, False)
    while node is None and fresh and await fresh[1]._on_limit.aask(fresh):  # on_limit granted more
        node, fresh = admit(ctx, kind, options, key, parent_id, False)
    if node is None or not fresh:
        return node  # type: ignore[return-value]
    if ctx._budgets and not (await ahold(ctx, node) if ctx._abudgets else hold(ctx, node)):  # type: ignore[arg-type]
        return None
    announce(ctx, node, inline)  # type: ignore[arg-type]
    return node  # type: ignore[return-value]
