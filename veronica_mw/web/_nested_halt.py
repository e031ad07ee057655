"""Halts of contexts nested in a request: the client gets the request's own refusal for them.

An endpoint may open its own context (a sub-agent with generous limits); its calls count in the
request's context, and a call the request cannot afford halts the nested context only (the
request's limit was not reached). Its ``ExecutionHalted`` is still the request's answer: the
middlewares refuse the request with that halt's reason and status (429, or 503 from a tenant pool)
and the request's usage and limits, and a WebSocket session closes with 1008.
"""

from __future__ import annotations

from ..kernel.exceptions import ExecutionHalted
from ..kernel.execution import ExecutionContext
from ..kernel.snapshot import ExecutionSnapshot


def _descendants(ctx: ExecutionContext) -> list[ExecutionContext]:
    found: list[ExecutionContext] = []
    stack = ctx.children
    while stack:
        child = stack.pop()
        found.append(child)
        stack.extend(child.children)
    return found


def nested_halt(ctx: ExecutionContext | None) -> ExecutionContext | None:
    """A context nested in ``ctx`` (at any depth) that has halted, or None."""
    if ctx is None or not ctx.children:
        return None
    for child in _descendants(ctx):
        if child.aborted:
            return child
    return None


def is_nested(ctx: ExecutionContext, halt: ExecutionHalted) -> bool:
    """Whether ``halt`` is the halt of a context nested in ``ctx``."""
    snapshot = halt.snapshot
    if snapshot is None or not ctx.children:
        return False
    return any(child.chain_id == snapshot.chain_id for child in _descendants(ctx))


def refusal_parts(
    ctx: ExecutionContext | None, halt: ExecutionHalted | None
) -> tuple[str, ExecutionSnapshot | None, int | None, str]:
    """(reason, snapshot, status, detail) of the refusal answering ``halt`` in a request whose
    context is ``ctx``: the request's own halt, a nested context's halt (its reason, status and
    detail with the request's usage and limits), or the halt of some unrelated context as it is."""
    if ctx is not None and (ctx.aborted or halt is None):
        return ctx.abort_reason or "cancelled", ctx.get_snapshot(), None, ""
    assert halt is not None
    if ctx is not None and is_nested(ctx, halt):
        status = halt.snapshot.http_status if halt.snapshot is not None else None
        return halt.reason, ctx.get_snapshot(), status, halt.detail
    return halt.reason, halt.snapshot, None, ""
