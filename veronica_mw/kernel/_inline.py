"""The ``wrap_*``/``call_*`` forms of a *plain* context, without a node object per call.

A plain context has no policy pipeline, circuit breaker, parent budget, output checks or observers
(its own or global ones): then nothing outside the kernel ever sees the call's node, so admission
and settlement run inline here, on a compact record in the graph (:meth:`ExecutionGraph.open` /
:meth:`~ExecutionGraph.close`), with exactly the checks of :meth:`Ledger._admit` and
:meth:`Ledger._close`. Whatever is not the common case -- a refusal, a divergence, a failure, a
result that carries usage to price -- leaves the inline path: the call's node object is made from
its record (:meth:`ExecutionGraph.promote`) and the ordinary code settles it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._validate import check_number
from .config import ExecutionConfig, WrapOptions
from .context import current_node
from .exceptions import ExecutionHalted
from .pricing import extract_usage
from .reasons import Decision, HaltReason

if TYPE_CHECKING:
    from .graph import CallNode, ExecutionGraph

_EPSILON = 1e-9  # as in _ledger
_monotonic = time.monotonic
_get_node = current_node.get
_NO_USAGE = (type(None), str, bytes, int, float, bool)  # results extract_usage never reads


class InlineCalls:
    """Mixin of :class:`~veronica_mw.ExecutionContext`; see that class for the state it uses."""

    if not TYPE_CHECKING:  # the slots live on ExecutionContext; mypy would reject writes here
        __slots__ = ()

    if TYPE_CHECKING:
        config: ExecutionConfig
        _reason: str | None
        _deadline: float
        _lock: threading.Lock
        _graph: ExecutionGraph | None
        _graph_args: tuple[int, int]
        _steps: int
        _committed: float
        _reserved: float
        _in_flight: int
        _partial: Any
        _step_gate: int
        _cost_gate: float

        def _cost_passed(self) -> bool: ...
        def _past_ceiling(self) -> None: ...

        def _graph_locked(self) -> ExecutionGraph: ...
        def _wrap(self, kind: str, fn: Callable[[], Any], options: WrapOptions | None) -> Decision: ...
        def _call(
            self, kind: str, fn: Callable[..., Any], args: Any, kwargs: Any, options: WrapOptions | None
        ) -> Any: ...
        async def _awrap(self, kind: str, fn: Callable[[], Any], options: WrapOptions | None) -> Decision: ...
        async def _acall(
            self, kind: str, fn: Callable[..., Any], args: Any, kwargs: Any, options: WrapOptions | None
        ) -> Any: ...
        def _run(self, node: CallNode, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any: ...
        async def _arun(self, node: CallNode, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any: ...
        def _diverged(self, node: CallNode) -> bool: ...
        def _fail(self, node: CallNode, exc: BaseException | None) -> None: ...
        def _interrupt(self, node: CallNode, exc: BaseException | None = None) -> None: ...
        def _abort(
            self,
            reason: HaltReason,
            detail: str = "",
            retry_after: float | None = None,
            http_status: int = 429,
        ) -> None: ...
        def add_event(self, kind: str, detail: str, **data: Any) -> None: ...
        def halted_error(self) -> ExecutionHalted: ...

    # -- admission and settlement on a record ------------------------------------------------------

    def _cost_inline(self, options: WrapOptions, result: Any) -> float | None:
        """The call's actual cost as :meth:`Ledger._actual_cost` finds it, or None when the result
        carries usage or a model name (pricing needs the node)."""
        cost_fn = options.cost_fn
        if cost_fn is not None:
            try:
                return check_number("cost_fn(result)", cost_fn(result))
            except Exception as exc:  # a broken cost_fn must not lose the reservation
                self.add_event("cost_fn_failed", f"{type(exc).__name__}: {exc}; reserved hint kept")
                return options.cost_estimate_hint
        if type(result) in _NO_USAGE or extract_usage(result) == (None, None):
            return options.cost_estimate_hint
        return None

    def _promote(
        self, node_id: int, kind: str, options: WrapOptions, parent_id: int | None, step: int
    ) -> CallNode:
        """The call's node object, from now on settled by the ordinary code."""
        with self._lock:
            node = self._graph.promote(  # type: ignore[union-attr]
                node_id, kind, options.operation_name or kind, parent_id, step, options
            )
        node._ctx = self  # always an ExecutionContext
        node._options = options
        return node

    # -- the forms ---------------------------------------------------------------------------------

    def _inline(
        self, kind: str, fn: Callable[..., Any], args: Any, kwargs: Any, options: WrapOptions, decision: bool
    ) -> Any:
        # One function on purpose (each call costs ~70 ns here): _ainline's _open_inline and
        # _settle_inline, with ExecutionGraph.open and .close, written out. Keep them in step.
        hint = options.cost_estimate_hint
        config = self.config
        parent_id = _get_node()
        node_id = 0
        if self._reason is None and not (self._deadline and _monotonic() >= self._deadline):
            lock = self._lock
            lock.acquire()  # not ``with``: the context-manager protocol doubles what a lock costs
            try:
                if not (
                    self._reason is not None
                    or self._steps >= self._step_gate  # the step limit, or a soft limit first
                    or (kind == "llm" or hint > 0.0)
                    and (
                        self._committed + self._reserved + hint > config.max_cost_usd + _EPSILON
                        or (kind == "llm" and self._committed + _EPSILON >= config.max_cost_usd)
                    )
                ):
                    step = self._steps = self._steps + 1
                    if hint:
                        self._reserved += hint
                    self._in_flight += 1
                    graph = self._graph or self._graph_locked()
                    name = options.operation_name or kind
                    node_id = graph._next_id = graph._next_id + 1
                    rec = (kind, name, parent_id, 0.0, 0, 0, "running", options.model, hint, options, None)
                    capacity = graph.capacity
                    if node_id <= capacity:
                        graph._ids.append(node_id)
                        graph._steps.append(step)
                        graph._t0.append(_monotonic())
                        graph._t1.append(0.0)
                        graph._recs.append(rec)
                    else:
                        i = (node_id - 1) % capacity
                        graph._ids[i] = node_id
                        graph._steps[i] = step
                        graph._t0[i] = _monotonic()
                        graph._t1[i] = 0.0
                        graph._recs[i] = rec
                    graph.total_nodes += 1
                    if kind == graph._last_kind and name == graph._last_name:
                        repeats = graph._repeats = graph._repeats + 1
                    else:
                        graph._last_kind, graph._last_name, repeats = kind, name, 1
                        graph._repeats = 1
            finally:
                lock.release()
        if not node_id:  # a limit says no: the ordinary path halts with the right reason
            return self._wrap(kind, fn, options) if decision else self._call(kind, fn, args, kwargs, options)
        if repeats == self._graph_args[1]:
            return self._ordinary(
                self._promote(node_id, kind, options, parent_id, step), fn, args, kwargs, decision
            )
        token = current_node.set(node_id)
        try:
            result = fn(*args, **kwargs) if args or kwargs else fn()
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
        if options.cost_fn is None and type(result) in _NO_USAGE:
            cost = hint
        else:
            found = self._cost_inline(options, result)
            if found is None:  # usage to price: the node's own settlement
                outcome = self._promote(node_id, kind, options, parent_id, step).commit(result)
                return outcome if decision else result
            cost = found
        lock = self._lock
        lock.acquire()
        graph = self._graph  # type: ignore[assignment]
        node = graph._live.pop(node_id, None) if graph._live else None
        if node is not None:  # a layer below took it as its node (graph.get): settle that one
            lock.release()
            outcome = node.commit(result)
            return outcome if decision else result
        try:
            if hint:
                self._reserved -= hint
            self._in_flight -= 1
            committed = self._committed = self._committed + cost
            i = (node_id - 1) % graph.capacity
            if graph._ids[i] == node_id:  # still in the ring
                graph._recs[i] = (kind, name, parent_id, cost, 0, 0, "ok", options.model, hint, options, None)
                graph._t1[i] = _monotonic()
            agg = graph._ok.get(kind) or graph._ok_aggregate(kind)
            agg.count += 1
            agg.cost_usd += cost
            self._partial = result
        finally:
            lock.release()
        # The gate is the ceiling, or lower when a soft limit comes first (as in Ledger._close).
        if committed > self._cost_gate and self._cost_passed():
            self._past_ceiling()
            return Decision.HALT if decision else result
        return Decision.ALLOW if decision else result

    def _ordinary(
        self, node: CallNode, fn: Callable[..., Any], args: Any, kwargs: Any, decision: bool
    ) -> Any:
        # The rest of _wrap/_call for a node that left the inline path at admission.
        if self._diverged(node):
            if decision:
                return Decision.HALT
            raise self.halted_error()
        try:
            result = self._run(node, fn, args, kwargs)
            outcome = node.commit(result)
        except ExecutionHalted:
            if decision:
                return Decision.HALT
            raise
        return outcome if decision else result
