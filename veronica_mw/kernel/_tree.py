"""The context tree: how a context nests in another (:func:`bind`) and :func:`format_tree`.

A nested context's calls also count in each ancestor, so it can never spend past the enclosing
limits; it inherits the nearest breaker, timeout pool and checks, every budget parent above, the
observers and ``on_warn``."""

from __future__ import annotations

from collections import deque

from ._lineage import is_async
from ._state import ContextState
from .parent import BudgetParent
from .snapshot import ExecutionSnapshot


def bind(ctx: ContextState, parent: ContextState) -> None:
    """Make ``ctx`` a child of ``parent`` (before ``ctx`` made any call)."""
    ctx._up = parent
    ctx._bound = True
    ctx._plain = False  # its calls count in every ancestor: never as records
    ctx._above = (parent, *parent._above)
    ctx._levels = (ctx._ledger, *(level._ledger for level in ctx._above))
    ctx._down = ctx._levels[::-1]  # root first: the order every thread takes the locks in
    if ctx._breaker is None:  # the nearest breaker guards the upstream the child calls
        ctx._breaker = parent._breaker
    if ctx._pool is None:
        ctx._pool = parent._pool
    if ctx._verifier is None:  # the enclosing output checks apply to the child's model calls too
        ctx._verifier = parent._verifier
    budgets: list[BudgetParent] = list(ctx._budgets)
    for budget in parent._budgets:
        if all(budget is not b for b in budgets):
            budgets.append(budget)
    ctx._budgets = tuple(budgets)
    ctx._abudgets = any(is_async(budget) for budget in budgets)
    if parent._observers:  # an audit log of the parent also sees its children's calls
        own = ctx._observers
        ctx._observers = (*parent._observers, *(o for o in own if o not in parent._observers))
    if ctx._on_warn is None:
        ctx._on_warn = parent._on_warn
    with parent._ledger.lock:
        if parent._children is None:
            parent._children = deque(maxlen=256)  # the most recent, for snapshots and the tree
        parent._children.append(ctx)


def _line(snapshot: ExecutionSnapshot) -> str:
    config = snapshot.config
    name = snapshot.name or f"context {snapshot.chain_id}"
    status = f"halted: {snapshot.abort_reason}" if snapshot.aborted else "ok"
    if snapshot.aborted and snapshot.abort_detail.startswith("ancestor "):
        status += " (ancestor)"
    return (
        f"{name}  steps {snapshot.step_count}/{config.max_steps}"
        f"  cost ${snapshot.cost_usd_accumulated:.6f}/${config.max_cost_usd:g}"
        f"  retries {snapshot.retries_used}/{config.max_retries_total}  {status}"
    )


def format_tree(snapshot: ExecutionSnapshot, *, ascii: bool = False) -> str:
    """Render ``snapshot`` and its children as an indented tree (box-drawing characters, or plain
    ASCII with ``ascii=True`` for logs and pipes)."""
    tee, last, bar = ("|-- ", "`-- ", "|   ") if ascii else ("├── ", "└── ", "│   ")
    lines = [_line(snapshot)]

    def walk(node: ExecutionSnapshot, prefix: str) -> None:
        count = len(node.children)
        for i, child in enumerate(node.children):
            final = i == count - 1
            lines.append(prefix + (last if final else tee) + _line(child))
            walk(child, prefix + ("    " if final else bar))

    walk(snapshot, "")
    return "\n".join(lines)
