"""What the OpenTelemetry observer keeps per execution context: its open spans, the span it
started under, downgrades and WebSocket message counts (dropped with the context)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from ..kernel.execution import ExecutionContext


class Call:
    __slots__ = ("span", "token", "operation")

    def __init__(self, span: Span, token: object, operation: str) -> None:
        self.span = span
        self.token = token  # set when the span was made current (inline calls only)
        self.operation = operation


class ContextState:
    """What the observer keeps per execution context (dropped with the context)."""

    __slots__ = ("chain_id", "parent_chain_id", "span", "calls", "downgraded", "received", "sent")

    def __init__(self, ctx: ExecutionContext, span: Span | None) -> None:
        self.chain_id = ctx.chain_id
        parent = ctx.parent
        self.parent_chain_id = parent.chain_id if parent is not None else None  # a sub-agent's context
        # Current when a root context started: the request's or session's span. A nested context
        # starts under its parent's spans and leaves them to the parent.
        self.span = span if parent is None else None
        self.calls: dict[int, Call] = {}  # open spans by node id
        self.downgraded: dict[int, str] = {}  # node id -> the fallback model it was sent to
        self.received = 0
        self.sent = 0


# Module-level, not per observer: when enable() swaps the observer while calls are open, the new
# one still finds and ends their spans.
states: WeakKeyDictionary[ExecutionContext, ContextState] = WeakKeyDictionary()
states_lock = threading.Lock()


def state_of(ctx: ExecutionContext, span: Span | None = None) -> ContextState:
    state = states.get(ctx)
    if state is None:
        with states_lock:
            state = states.get(ctx)
            if state is None:
                state = states[ctx] = ContextState(ctx, span)
    return state
