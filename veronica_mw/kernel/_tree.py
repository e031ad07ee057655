"""Sub-agent budgets and the cost tree: ``ctx.child(...)``, ``ctx.tree()`` and the context's family.

A coordinator gives each sub-agent its own share with :meth:`Family.child`; whatever share it
gets, the sub-agent's calls also count in the coordinator (see :mod:`._nesting`), so the shares
can never add up to more than the coordinator may spend. :func:`format_tree` renders a snapshot
and its children as text: name, steps, cost against its limit, and status per context.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from .config import ExecutionConfig

if TYPE_CHECKING:
    from .execution import ExecutionContext
    from .snapshot import ExecutionSnapshot

# A parent keeps its most recent children for snapshots and the tree (its own counters already
# include every child's usage, however many there were).
MAX_CHILDREN = 256


class Family:
    """Mixin of :class:`~veronica_mw.ExecutionContext`; the slots live there."""

    if not TYPE_CHECKING:
        __slots__ = ()

    if TYPE_CHECKING:
        config: ExecutionConfig
        _lock: threading.Lock
        _steps: int
        _committed: float
        _reserved: float
        _retries: int
        _deadline: float
        _up: ExecutionContext | None
        _name: str
        _children: deque[ExecutionContext] | None

        def get_snapshot(self) -> ExecutionSnapshot: ...

    @property
    def name(self) -> str:
        return self._name

    @property
    def parent(self) -> ExecutionContext | None:
        """The enclosing context whose limits this one's calls also count against (None: a root)."""
        return self._up

    @property
    def children(self) -> list[ExecutionContext]:
        """The contexts nested in this one (the most recent ``MAX_CHILDREN``), oldest first."""
        return list(self._children or ())

    def _add_child(self, child: ExecutionContext) -> None:
        with self._lock:
            if self._children is None:
                self._children = deque(maxlen=MAX_CHILDREN)
            self._children.append(child)

    def child(
        self,
        name: str,
        *,
        max_cost_usd: float | None = None,
        max_steps: int | None = None,
        max_retries_total: int | None = None,
        timeout_ms: float | None = None,
    ) -> ExecutionContext:
        """A child context for a sub-agent, with its own limits; an omitted limit is what this
        context has left now. Its calls count here too, so it can never spend past this context.
        Not entered: use ``with ctx.child(...) as sub:`` or call through it directly.
        """
        from .execution import ExecutionContext  # the mixin is part of that class

        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        config = self.config
        with self._lock:
            cost_left = max(0.0, config.max_cost_usd - self._committed - self._reserved)
            steps_left = max(0, config.max_steps - self._steps)
            retries_left = max(0, config.max_retries_total - self._retries)
        if timeout_ms is None:
            # Zero would mean "no deadline"; this context's deadline still applies to the child.
            timeout_ms = max(0.0, (self._deadline - time.monotonic()) * 1000.0) if self._deadline else 0
        limits = ExecutionConfig(
            max_cost_usd=cost_left if max_cost_usd is None else max_cost_usd,
            max_steps=steps_left if max_steps is None else max_steps,
            max_retries_total=retries_left if max_retries_total is None else max_retries_total,
            timeout_ms=timeout_ms,
            warn_at=config.warn_at,
        )
        parent: Any = self
        return ExecutionContext(limits, parent=parent, name=name)

    def tree(self, *, ascii: bool = False) -> str:
        """This context and the ones nested in it, one line each: name, steps, cost / limit, status."""
        return format_tree(self.get_snapshot(), ascii=ascii)


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
