"""The ContextVar that holds the execution context of the current request, task or thread."""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .execution import ExecutionContext

# The graph node of the wrapped call running now, so nested calls record their parent.
current_node: ContextVar[int | None] = ContextVar("veronica_mw_node", default=None)
current_context: ContextVar[ExecutionContext | None] = ContextVar("veronica_mw_context", default=None)


def get_current_execution_context() -> ExecutionContext | None:
    """Return the context of the current request or ``with ExecutionContext(...)`` block, if any."""
    return current_context.get()
