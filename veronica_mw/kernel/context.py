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
                    ctx = self.ctx = self._factory()
        return ctx


_build_lock = threading.Lock()

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
