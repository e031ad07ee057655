"""Nested contexts: a child's every step, reservation, committed cost and retry also counts in each
ancestor, so no context nested in another can spend past the enclosing limits.

A nested context's ``_lineage`` is ``(ctx, parent, grandparent, ..., root)``. Admission takes the
locks of the whole lineage, root first (every thread takes them in that order, so they cannot
deadlock), checks every level, and reserves in all of them or in none: a refusal anywhere leaves
no trace elsewhere. The refused context halts with the refusing ancestor's reason and a detail
naming it; the ancestor itself halts only when its own limit is reached (a step limit, or cost
spent), not because one large reservation did not fit. Settlement walks the ancestors one lock
at a time. A tenant pool (budget parent) anywhere in the lineage is reserved once per call, and
an ancestor's halt (limit, timeout, cancel) halts its descendants at their next call.

Only nested contexts come here: the flat path in :mod:`._ledger` is untouched.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .config import WrapOptions
from .context import current_node
from .policy import PolicyContext, PolicyDecision
from .reasons import HaltReason

if TYPE_CHECKING:
    from collections.abc import Hashable

    from .execution import ExecutionContext
    from .graph import CallNode
    from .parent import BudgetParent

_EPSILON = 1e-9
# CallNode._held of a nested call (beyond _ledger's FREE, HELD, AWAITED, OWED): its settle reaches
# the ancestors (NESTED), and the budget parents above them too (NESTED_HELD).
NESTED, NESTED_HELD = 4, 5


# -- binding -----------------------------------------------------------------------------------------


class _RootLineage(tuple):  # type: ignore[type-arg]
    """The ``_lineage`` of a context that is a root for good (``parent=None``, or entered inside
    another after it had already spent): decided (truthy), yet holding nothing -- ``(ctx,)`` would
    be a reference cycle through every request context, leaving each to the garbage collector.
    Only nested lineages (``ctx._up`` set) are ever read for their levels."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return True


ROOT: tuple[ExecutionContext, ...] = _RootLineage()


def bind(ctx: ExecutionContext, parent: ExecutionContext) -> None:
    """Make ``ctx`` a child of ``parent``: its lineage, and what it inherits (the nearest breaker,
    timeout pool and output checks, every budget parent above, the observers, ``on_warn``)."""
    ctx._up = parent
    ctx._plain = False  # its calls count in every ancestor: never the inline path (see _inline)
    ctx._lineage = (ctx, *(parent._lineage if parent._up is not None else (parent,)))
    ctx._down = ctx._lineage[::-1]  # root first: the order every thread takes the locks in
    if ctx._breaker is None:  # the nearest breaker guards the upstream the child calls
        ctx._breaker = parent._breaker
    if ctx._pool is None:
        ctx._pool = parent._pool
    if ctx._verifier is None:  # the enclosing output checks apply to the child's model calls too
        ctx._verifier = parent._verifier
    # Budget parents of a nested call are reserved and settled synchronously (all of them, in
    # one pass with the ancestors), also from the coroutine API.
    ctx._aparent = None
    budgets: list[BudgetParent] = [] if ctx._parent is None else [ctx._parent]
    for level in ctx._lineage[1:]:
        if level._parent is not None and all(level._parent is not b for b in budgets):
            budgets.append(level._parent)
    ctx._budgets = tuple(budgets)
    if parent._observers:  # an audit log of the parent also sees its children's calls
        own = ctx._observers
        ctx._observers = (*parent._observers, *(o for o in own if o not in parent._observers))
    if ctx._on_warn is None:
        ctx._on_warn = parent._on_warn
    parent._add_child(ctx)


def is_ancestor(candidate: ExecutionContext, ctx: ExecutionContext) -> bool:
    return ctx._up is not None and any(level is candidate for level in ctx._lineage[1:])


def chain_ids(ctx: ExecutionContext) -> tuple[str, ...]:
    return tuple(level.chain_id for level in ctx._lineage)


def label(level: ExecutionContext) -> str:
    if level._name:
        return f"ancestor {level._name!r} [chain {level.chain_id}]"
    return f"ancestor {level.chain_id}"


# -- halts flowing down ------------------------------------------------------------------------------


def inherit(ctx: ExecutionContext, level: ExecutionContext) -> None:
    """Halt ``ctx`` because its ancestor ``level`` halted (same reason, detail naming it)."""
    reason = level._reason
    if reason is None or ctx._reason is not None:
        return
    ctx._abort(HaltReason(reason), f"{label(level)}: {level._detail}", level._retry_after, level._http_status)


def halted_ancestor(ctx: ExecutionContext) -> ExecutionContext | None:
    """The top-most ancestor of ``ctx`` that has halted, if any."""
    lineage = ctx._lineage
    for i in range(len(lineage) - 1, 0, -1):
        if lineage[i]._reason is not None:
            return lineage[i]
    return None


def halted_above(ctx: ExecutionContext) -> bool:
    """True (and ``ctx`` halted) if an ancestor has halted; the top-most one is named."""
    level = halted_ancestor(ctx)
    if level is None:
        return False
    inherit(ctx, level)
    return True


def check_deadlines(ctx: ExecutionContext) -> None:
    """Fire any passed deadline in the lineage (a timer may not be armed), root first."""
    now = time.monotonic()
    lineage = ctx._lineage
    for i in range(len(lineage) - 1, -1, -1):
        level = lineage[i]
        if level._reason is None and level._deadline and now >= level._deadline:
            level._on_deadline()


# -- admission ---------------------------------------------------------------------------------------


def begin(
    ctx: ExecutionContext,
    kind: str,
    options: WrapOptions,
    key: Hashable | None,
    parent_id: int | None,
    inline: bool,
) -> CallNode | None:
    if ctx._reason is not None:
        return None
    hint = options.cost_estimate_hint
    name = options.operation_name or kind
    lineage, down = ctx._lineage, ctx._down
    now = 0.0
    fallback: str | None = None
    for level in down:  # root first: the top-most halted ancestor is the one named
        if level._reason is None and level._deadline:
            now = now or time.monotonic()
            if now >= level._deadline:
                level._on_deadline()
        if level._reason is not None:
            inherit(ctx, level)
            return None
        if level._pipeline is not None:
            decision = _evaluate(ctx, level, kind, name, hint)
            if decision is None:
                return None
            if (
                decision.fallback_model is not None
                and kind == "llm"
                and decision.fallback_model != options.model
            ):
                fallback = decision.fallback_model  # the nearest level's downgrade wins
    if fallback is not None:
        # MODIFY: the call runs on the fallback, so it is reserved at the fallback's price.
        hint = ctx._fallback_hint(hint, options, fallback)
    refusal: tuple[ExecutionContext, HaltReason | None, str, bool] | None = None
    node: Any = None
    repeats = 0
    priced = kind == "llm" or hint > 0.0
    for level in down:
        level._lock.acquire()
    try:
        if key is not None:
            if ctx._open_keys is None:
                ctx._open_keys = {}
            existing = ctx._open_keys.get(key)
            if existing is not None:
                return existing
        for level in lineage:
            config = level.config
            # Inlined fast test (the common case passes every level); details only on refusal.
            if (
                level._reason is not None
                or level._steps >= config.max_steps
                or (
                    priced
                    and (
                        level._committed + level._reserved + hint > config.max_cost_usd + _EPSILON
                        or (kind == "llm" and level._committed + _EPSILON >= config.max_cost_usd)
                    )
                )
            ):
                refusal = _refusal_locked(level, kind, hint)
                break
        else:
            for level in lineage:
                level._steps += 1
                level._reserved += hint
                level._in_flight += 1
            node, repeats = (ctx._graph or ctx._graph_locked()).add(
                kind, name, parent_id if parent_id is not None else current_node.get()
            )
            node._ctx = ctx
            node._options = options
            node.reserved_usd = hint
            node.model = options.model
            node.step = ctx._steps
            if fallback is not None:
                node.fallback_model = fallback
            node._held = NESTED  # its settle reaches the ancestors
            if key is not None:
                node.key = key
                ctx._open_keys[key] = node  # type: ignore[index]
    finally:
        for level in lineage:
            level._lock.release()
    if refusal is not None:
        _refused(ctx, *refusal)
        return None
    for level in lineage:
        if level._steps > level._step_gate and level.config.warn_at:  # the gate is on steps before
            level._soft_limit("steps")
    if repeats == ctx._graph_args[1] and ctx._diverged(node):
        return None
    breaker = ctx._breaker
    if breaker is not None:
        decision = breaker.check(None)
        if not decision.allowed:
            ctx._close(node, "refused", 0.0, refund_step=True)
            wait = decision.rate_limit_ms / 1000.0 if decision.rate_limit_ms else None
            ctx._abort(HaltReason.CIRCUIT_OPEN, decision.reason, wait)
            return None
        node._probe = True
    budgets = ctx._budgets
    if budgets:
        for i, budget in enumerate(budgets):
            if not budget.reserve(hint):
                for held in budgets[:i]:
                    held.settle(hint, 0.0)
                ctx._close(node, "refused", 0.0, refund_step=True)
                ctx._parent_refused(budget)
                return None
        node._held = NESTED_HELD
    ctx._announce(node, inline)  # its own approval gates, observers (and call bodies)
    if kind == "tool":
        # ``begin_call`` asks these before the tool runs (see _verdicts.Verdicts._approve): an
        # ancestor's approval policy gates the tools of its children too.
        gates = tuple(
            gate
            for level in down
            if level._pipeline is not None
            for gate in level._pipeline.gates
            if gate.gates(name)
        )
        if gates:
            node._gates = gates
    return node  # type: ignore[no-any-return]


def _evaluate(
    ctx: ExecutionContext, level: ExecutionContext, kind: str, name: str, hint: float
) -> PolicyDecision | None:
    """``level``'s pipeline on the call (as if made there); None: denied, and both halted."""
    decision = level._pipeline.evaluate(  # type: ignore[union-attr]
        PolicyContext(
            cost_usd=level._committed,
            step_count=level._steps,
            retries_used=level._retries,
            cost_estimate_usd=hint,
            kind=kind,
            operation_name=name,
            chain_id=level.chain_id,
            max_cost_usd=level.config.max_cost_usd,
        )
    )
    if decision.allowed:
        return decision
    wait = decision.rate_limit_ms / 1000.0 if decision.rate_limit_ms else None
    level._abort(HaltReason.POLICY_DENIED, f"{decision.policy_type}: {decision.reason}", wait)
    inherit(ctx, level)
    return None


def _refusal_locked(
    level: ExecutionContext, kind: str, hint: float
) -> tuple[ExecutionContext, HaltReason | None, str, bool] | None:
    """Why ``level`` refuses the call (held under its lock): (level, reason, detail, limit reached)."""
    if level._reason is not None:
        return level, None, "", True
    config = level.config
    if level._steps >= config.max_steps:
        return level, HaltReason.STEP_LIMIT, level._limit_detail(HaltReason.STEP_LIMIT, hint), True
    if (kind == "llm" or hint > 0.0) and (
        level._committed + level._reserved + hint > config.max_cost_usd + _EPSILON
        or (kind == "llm" and level._committed + _EPSILON >= config.max_cost_usd)
    ):
        spent = level._committed + _EPSILON >= config.max_cost_usd
        return level, HaltReason.BUDGET_EXCEEDED, level._limit_detail(HaltReason.BUDGET_EXCEEDED, hint), spent
    return None


def _refused(
    ctx: ExecutionContext, level: ExecutionContext, reason: HaltReason | None, detail: str, reached: bool
) -> None:
    if reason is None:  # the ancestor halted while we waited for its lock
        inherit(ctx, level)
    elif level is ctx:
        ctx._abort(reason, detail)
    else:
        if reached:
            level._abort(reason, detail)
        ctx._abort(reason, f"{label(level)}: {detail}")


# -- settlement --------------------------------------------------------------------------------------


def settle_up(ctx: ExecutionContext, node: CallNode, cost: float, refund_step: bool, budgets: bool) -> bool:
    """Settle ``node`` (already settled in ``ctx``) in every ancestor and in the budget parents;
    True when an ancestor has halted (the cost took it past its ceiling, or it halted meanwhile)."""
    reserved = node.reserved_usd
    gated: list[ExecutionContext] | None = None
    halted = False
    for level in ctx._lineage[1:]:
        with level._lock:
            level._reserved -= reserved
            level._in_flight -= 1
            level._committed += cost
            if refund_step:
                level._steps -= 1
            if level._committed > level._cost_gate:  # the ceiling, or a soft limit before it
                gated = [level] if gated is None else [*gated, level]
    if budgets:
        for budget in ctx._budgets:
            budget.settle(reserved, cost)
    for level in gated or ():
        if level._cost_passed():
            # The call already ran; its cost took this ancestor past its ceiling: it halts.
            level._abort(
                HaltReason.BUDGET_EXCEEDED,
                f"actual cost took the total to {level._committed:.6f} > {level.config.max_cost_usd:g}",
            )
            halted = True
    return halted


def add_reservation(ctx: ExecutionContext, node: CallNode, usd: float) -> None:
    """``node.add_reservation(usd)`` of a nested call: reserved in every level (and the budget
    parents above) or in none; raise ExecutionHalted when a level would be exceeded."""
    check_deadlines(ctx)
    if ctx._reason is not None or halted_above(ctx):
        raise ctx.halted_error()
    lineage = ctx._lineage
    refusal: tuple[ExecutionContext, HaltReason | None, str, bool] | None = None
    added = False
    for level in ctx._down:
        level._lock.acquire()
    try:
        for level in lineage:  # the step is taken already: only its cost grows
            config = level.config
            if level._reason is not None:
                refusal = (level, None, "", True)
                break
            if level._committed + level._reserved + usd > config.max_cost_usd + _EPSILON:
                detail = level._limit_detail(HaltReason.BUDGET_EXCEEDED, usd)
                spent = level._committed + _EPSILON >= config.max_cost_usd
                refusal = (level, HaltReason.BUDGET_EXCEEDED, detail, spent)
                break
        else:
            if node.status == "running":
                for level in lineage:
                    level._reserved += usd
                node.reserved_usd += usd
                added = True
    finally:
        for level in lineage:
            level._lock.release()
    if refusal is not None:
        _refused(ctx, *refusal)
        raise ctx.halted_error()
    if not added or usd <= 0.0 or node._held != NESTED_HELD:
        return
    budgets = ctx._budgets
    for i, budget in enumerate(budgets):
        if not budget.reserve(usd):
            for held in budgets[:i]:
                held.settle(usd, 0.0)
            for level in ctx._down:
                level._lock.acquire()
            try:
                if node.status == "running":
                    for level in lineage:
                        level._reserved -= usd
                    node.reserved_usd -= usd
            finally:
                for level in lineage:
                    level._lock.release()
            ctx._parent_refused(budget)
            raise ctx.halted_error()


def record_retry(ctx: ExecutionContext, exc: BaseException | None) -> bool:
    """Draw one retry in ``ctx`` and every ancestor, or in none (and halt) when one is spent."""
    lineage = ctx._lineage
    spent: ExecutionContext | None = None
    for level in ctx._down:
        level._lock.acquire()
    try:
        for level in lineage:
            if level._retries >= level.config.max_retries_total:
                spent = level
                break
        else:
            for level in lineage:
                level._retries += 1
    finally:
        for level in lineage:
            level._lock.release()
    if spent is None:
        for level in lineage:
            if level._retries >= level._warn_retries:
                level._soft_limit("retries")
        return True
    name = type(exc).__name__ if exc is not None else "failure"
    detail = f"{name} after {spent.config.max_retries_total} retries"
    spent._abort(HaltReason.RETRY_LIMIT, detail)
    if spent is not ctx:
        ctx._abort(HaltReason.RETRY_LIMIT, f"{label(spent)}: {detail}")
    return False
