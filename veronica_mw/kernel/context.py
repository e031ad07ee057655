"""The ContextVars of the current execution context (and pending request context) and call node.

Defined with the class they hold (:mod:`.execution`) and the call graph (:mod:`.graph`); this
module is where the rest of the package imports them from.
"""

from __future__ import annotations

from .execution import (
    PendingContext,
    current_context,
    enclosing_context,
    get_current_execution_context,
)
from .graph import current_node

__all__ = [
    "PendingContext",
    "current_context",
    "current_node",
    "enclosing_context",
    "get_current_execution_context",
]
