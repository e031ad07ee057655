"""The ContextVar that holds the execution context of the current request, task or thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .execution import ExecutionContext


class PendingContext:
    """A request's execution context that is built only when something first asks for it.

    The middlewares put one of these in the ContextVar instead of a ready context, so a request
    that never makes a model or tool call never pays for a context. Every copy of the request's
    ``contextvars`` context (threadpool endpoints, background tasks) shares this one object, so
    they all resolve to the same :class:`ExecutionContext`.
    """

    __slots__ = ("_factory", "ctx")

    def __init__(self, factory: Callable[[], ExecutionContext]) -> None:
        self._factory = factory
        self.ctx: ExecutionContext | None = None

    def resolve(self) -> ExecutionContext:
        ctx = self.ctx
        if ctx is None:
            with _build_lock:  # held only while one context is built; contention is rare
                ctx = self.ctx
                if ctx is None:
                    _building.pending = self
                    try:
                        ctx = self.ctx = self._factory()
                    finally:
                        _building.pending = None
        return ctx


_build_lock = threading.Lock()
# The PendingContext whose factory runs on this thread: the context it builds has no parent in it.
_building = threading.local()

# The graph node of the wrapped call running now, so nested calls record their parent.
current_node: ContextVar[int | None] = ContextVar("veronica_mw_node", default=None)
current_context: ContextVar[ExecutionContext | PendingContext | None] = ContextVar(
    "veronica_mw_context", default=None
)


def get_current_execution_context() -> ExecutionContext | None:
    """Return the context of the current request or ``with ExecutionContext(...)`` block, if any."""
    value = current_context.get()
    if isinstance(value, PendingContext):
        return value.resolve()
    return value


def enclosing_context() -> ExecutionContext | None:
    """The context a new (or newly entered) context nests in: the current one, a pending request
    context built now if need be -- except the one whose factory is running on this thread."""
    value = current_context.get()
    if isinstance(value, PendingContext):
        if value.ctx is None and getattr(_building, "pending", None) is value:
            return None
        return value.resolve()
    return value
