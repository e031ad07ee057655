"""The ContextVars of the current execution context (and pending request context) and call node:
where the rest of the package imports them from (they live in :mod:`.execution` and :mod:`._node`)."""

from __future__ import annotations

from .execution import PendingContext, current_context, enclosing_context, get_current_execution_context
from .graph import current_node

__all__ = [
    "PendingContext", "current_context", "current_node", "enclosing_context", "get_current_execution_context"
]  # fmt: skip
