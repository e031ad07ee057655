"""The lineage of a context beyond one call's settle: refusals (which level said no, who halts),
budget parents' refusals, retries drawn in every level, and reservations grown mid-call."""

from __future__ import annotations

from ._node import HELD, CallNode
from ._state import ContextState, label
from ._validate import check_number
from .parent import BudgetParent
from .reasons import HaltReason


def is_async(budget: BudgetParent) -> bool:
    """Whether the coroutine API awaits ``budget`` (a Redis pool); one whose sync answers never
    wait for I/O (``blocking_free``) is simply called."""
    return (
        callable(getattr(budget, "areserve", None))
        and callable(getattr(budget, "asettle", None))
        and not getattr(budget, "blocking_free", False)
    )


def record_retry(ctx: ContextState, exc: BaseException | None) -> bool:
    """Draw one retry in every level of the lineage, or in none (and halt) when one is spent."""
    levels = ctx._levels
    spent = -1
    for ledger in ctx._down:
        ledger.lock.acquire()
    try:
        for i, ledger in enumerate(levels):
            if ledger.retries >= ledger.config.max_retries_total:
                spent = i
                break
        else:
            for ledger in levels:
                ledger.retries += 1
    finally:
        for ledger in levels:
            ledger.lock.release()
    if spent < 0:
        for i, ledger in enumerate(levels):
            if ledger.retries >= ledger.warn_retries:
                _level(ctx, i)._soft_limit("retries")
        return True
    level = _level(ctx, spent)
    name = type(exc).__name__ if exc is not None else "failure"
    detail = f"{name} after {level.config.max_retries_total} retries"
    level._abort(HaltReason.RETRY_LIMIT, detail)
    if level is not ctx:
        ctx._abort(HaltReason.RETRY_LIMIT, f"{label(level)}: {detail}")
    return False


def _level(ctx: ContextState, i: int) -> ContextState:
    """The context whose ledger is ``ctx._levels[i]``."""
    return ctx if i == 0 else ctx._above[i - 1]


def add_reservation(ctx: ContextState, node: CallNode, usd: float) -> None:
    """Reserve ``usd`` more for a running call in every level (and the budget parents) or in none;
    raise ExecutionHalted when a level would be exceeded or the context halted meanwhile."""
    usd = check_number("usd", usd)
    if usd == 0.0:  # nothing more to reserve: the call was admitted when its step began
        return
    if ctx._halted_now():
        raise ctx.halted_error()
    refused = _grow(ctx, node, usd, True)
    if refused is not None:
        refuse(ctx, *refused)
        raise ctx.halted_error()
    if node._held != HELD or node.status != "running":
        return
    taken: list[BudgetParent] = []
    for budget in ctx._budgets:
        if not budget.reserve(usd):
            for held in taken:
                held.settle(usd, 0.0)
            _grow(ctx, node, -usd, False)
            budget_refused(ctx, budget)
            raise ctx.halted_error()
        taken.append(budget)


def _grow(
    ctx: ContextState, node: CallNode, usd: float, check: bool
) -> tuple[int, tuple[HaltReason | None, str, bool]] | None:
    """Reserve ``usd`` more (less, when negative) for a running ``node`` in every level -- or, with
    ``check``, in none when a level cannot fit it: then (that level, its ``Ledger.refusal``)."""
    levels = ctx._levels
    for ledger in ctx._down:
        ledger.lock.acquire()
    try:
        for i, ledger in enumerate(levels if check else ()):  # the step is taken: only cost grows
            if not ledger.fits(usd):
                return i, ledger.refusal("llm", usd, cost_only=True)
        if node.status == "running":
            for ledger in levels:
                ledger.reserved += usd
            node.reserved_usd += usd
    finally:
        for ledger in levels:
            ledger.lock.release()
    return None


def refuse(ctx: ContextState, i: int, refusal: tuple[HaltReason | None, str, bool]) -> None:
    """Halt ``ctx`` because level ``i`` of its lineage refused a call. That ancestor halts too only
    when its own limit is reached (steps, or cost spent), not because one large hint did not fit."""
    level = _level(ctx, i)
    reason, detail, reached = refusal
    if reason is None:  # halted while we waited for its lock
        ctx._inherit(level)
    elif level is ctx:
        ctx._abort(reason, detail)
    else:
        if reached:
            level._abort(reason, detail)
        ctx._abort(reason, f"{label(level)}: {detail}")


def budget_refused(ctx: ContextState, budget: BudgetParent) -> None:
    status = getattr(budget, "refusal_status", 429)
    detail = getattr(budget, "refusal_detail", "") or "parent budget exhausted"
    if status == 503:  # the budget store is down and fails closed: not the tenant's fault
        ctx._abort(HaltReason.POLICY_DENIED, detail, budget.retry_after_s(), http_status=503)
    else:
        ctx._abort(HaltReason.BUDGET_EXCEEDED, detail, budget.retry_after_s())
