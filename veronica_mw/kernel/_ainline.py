"""The async ``awrap_*``/``acall_*`` forms of a *plain* context (see :mod:`._inline`).

Admission and settlement are the two halves the sync form has written out in
:meth:`InlineCalls._inline`, as methods: an await sits between them, so nothing is gained by
inlining them here. Keep the three in step.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._inline import _EPSILON, InlineCalls, _get_node, _monotonic
from .config import WrapOptions
from .context import current_node
from .exceptions import ExecutionHalted
from .reasons import Decision


class AsyncInlineCalls(InlineCalls):
    """Mixin of :class:`~veronica_mw.ExecutionContext`; the slots live there."""

    if not TYPE_CHECKING:
        __slots__ = ()

    def _open_inline(self, kind: str, options: WrapOptions) -> tuple[int, int, int | None, int]:
        """Admit one call as :meth:`Ledger._admit` would: (node id, repeats, parent id, step), or a
        node id of 0 when any limit says no (the caller takes the ordinary path, which halts)."""
        if self._reason is not None or (self._deadline and _monotonic() >= self._deadline):
            return 0, 0, None, 0
        hint = options.cost_estimate_hint
        config = self.config
        parent_id = _get_node()
        with self._lock:
            if (
                self._reason is not None
                or self._steps >= self._step_gate  # the step limit, or a soft limit first
                or (kind == "llm" or hint > 0.0)
                and (
                    self._committed + self._reserved + hint > config.max_cost_usd + _EPSILON
                    or (kind == "llm" and self._committed + _EPSILON >= config.max_cost_usd)
                )
            ):
                return 0, 0, None, 0
            step = self._steps = self._steps + 1
            self._reserved += hint
            self._in_flight += 1
            graph = self._graph or self._graph_locked()
            node_id, repeats = graph.open(kind, options.operation_name or kind, parent_id, step, options)
        return node_id, repeats, parent_id, step

    def _settle_inline(
        self, node_id: int, kind: str, options: WrapOptions, cost: float, result: Any
    ) -> Decision:
        """Settle a call of the inline path as :meth:`Ledger._close` / ``_settle_ok`` would (the
        sync form has this written out in :meth:`_inline`)."""
        hint = options.cost_estimate_hint
        lock = self._lock
        lock.acquire()
        graph: Any = self._graph
        node = graph._live.pop(node_id, None) if graph._live else None
        if node is not None:  # a layer below took it as its node (graph.get): settle that one
            lock.release()
            return node.commit(result)  # type: ignore[no-any-return]
        try:
            self._reserved -= hint
            self._in_flight -= 1
            committed = self._committed = self._committed + cost
            graph.close(node_id, kind, "ok", cost)
            self._partial = result
        finally:
            lock.release()
        if committed > self._cost_gate and self._cost_passed():
            self._past_ceiling()
            return Decision.HALT
        return Decision.ALLOW

    async def _ainline(
        self, kind: str, fn: Callable[..., Any], args: Any, kwargs: Any, options: WrapOptions, decision: bool
    ) -> Any:
        node_id, repeats, parent_id, step = self._open_inline(kind, options)
        if not node_id:
            if decision:
                return await self._awrap(kind, fn, options)
            return await self._acall(kind, fn, args, kwargs, options)
        if repeats == self._graph_args[1]:
            node = self._promote(node_id, kind, options, parent_id, step)
            if self._diverged(node):
                if decision:
                    return Decision.HALT
                raise self.halted_error()
            try:
                result = await self._arun(node, fn, args, kwargs)
                outcome = node.commit(result)
            except ExecutionHalted:
                if decision:
                    return Decision.HALT
                raise
            return outcome if decision else result
        token = current_node.set(node_id)
        try:
            result = fn(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            self._fail(self._promote(node_id, kind, options, parent_id, step), exc)
            if decision and isinstance(exc, ExecutionHalted):
                return Decision.HALT
            raise
        except BaseException as exc:
            self._interrupt(self._promote(node_id, kind, options, parent_id, step), exc)
            raise
        finally:
            current_node.reset(token)
        cost = self._cost_inline(options, result)
        if cost is None:
            outcome = self._promote(node_id, kind, options, parent_id, step).commit(result)
        else:
            outcome = self._settle_inline(node_id, kind, options, cost, result)
        return outcome if decision else result
