"""ContextState: everything one ExecutionContext holds, declared once, and how it halts and reads.

The counters and limits live in its :class:`~._ledger.Ledger`; the parts that act on a context
(admission, settlement, verdicts, call forms) are functions of this state."""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import time
import weakref
from collections import deque
from collections.abc import Callable, Hashable, Mapping
from contextvars import Token
from types import MappingProxyType
from typing import Any

from . import observer as _obs
from ._control import OutputVerifier
from ._ledger import Ledger
from .cancellation import CancellationToken
from .circuit_breaker import CircuitBreaker
from .config import ExecutionConfig
from .exceptions import ExecutionHalted
from .graph import CallNode, ExecutionGraph
from .parent import BudgetParent
from .policy import PolicyPipeline
from .reasons import HaltReason
from .snapshot import ExecutionEvent, ExecutionSnapshot
from .timeout_pool import SharedTimeoutPool, TimeoutHandle

logger = logging.getLogger("veronica_mw")
# chain ids: a random per-process prefix plus a counter. os.urandom per context costs several µs
# on some kernels; this is unique per context and, with the prefix, across processes.
_chain_prefix = secrets.token_hex(6)
_chain_counter = itertools.count(1)
NO_ATTRIBUTES: Mapping[str, str] = MappingProxyType({})
_monotonic = time.monotonic


def _new_chain_prefix() -> None:
    global _chain_prefix, _chain_counter
    _chain_prefix = secrets.token_hex(6)
    _chain_counter = itertools.count(1)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_chain_prefix)


def label(level: ContextState) -> str:
    if level._name:
        return f"ancestor {level._name!r} [chain {level.chain_id}]"
    return f"ancestor {level.chain_id}"


class ContextState:
    """The state of one context. Rarely set state is a class-level default until first written
    (an instance dict appears only then): construction is on every request's path."""

    __slots__ = (
        "config", "_ledger", "_levels", "_down", "_chain_prefix", "_chain_no", "_plain", "_name", "_graph",
        "_partial", "_var_tokens", "_armed", "_started", "_deadline", "_observers", "__weakref__",
        "__dict__",
    )  # fmt: skip

    _pipeline: PolicyPipeline | None = None
    _breaker: CircuitBreaker | None = None
    # Budget parents (tenant pools) a call reserves in: this context's and every ancestor's.
    _budgets: tuple[BudgetParent, ...] = ()
    _parent: BudgetParent | None = None  # the one given to this context (read by the pools)
    _abudgets = False  # whether one of them is awaited by the coroutine API (see _lineage.is_async)
    _token: CancellationToken | None = None
    _graph_args: tuple[int, int] = (10_000, 25)  # (capacity, divergence threshold)
    _halt_on_divergence: bool = False
    _events: deque[ExecutionEvent] | None = None
    _open_keys: dict[Hashable, CallNode] | None = None
    _pool: SharedTimeoutPool | None = None
    _timer: TimeoutHandle | None = None
    attributes: Mapping[str, str] = NO_ATTRIBUTES
    _verifier: OutputVerifier | None = None
    _up: ContextState | None = None  # the parent
    _above: tuple[ContextState, ...] = ()  # the ancestors, nearest first
    _bound = False  # whether nesting is decided (a context may nest when first entered)
    _children: deque[ContextState] | None = None
    _on_warn: Callable[[ExecutionEvent], Any] | None = None
    _on_limit: Any = None  # asks for more at this context's own limit (not inherited; see _escalate)
    _asking: Any = None  # the pending ask's Future, under the lock

    def __init__(self, config: ExecutionConfig) -> None:
        self.config = config
        ledger = self._ledger = Ledger(config)
        # (own, parent's, ..., root's) and root first: a root's lineage is its own ledger alone.
        self._levels: tuple[Ledger, ...] = (ledger,)
        self._down: tuple[Ledger, ...] = self._levels
        self._chain_prefix = _chain_prefix
        self._chain_no = next(_chain_counter)
        self._graph: ExecutionGraph | None = None  # built on first use: many requests make no call
        self._partial: Any = None
        self._var_tokens: Token[Any] | list[Token[Any]] | None = None  # of each ``with``
        self._armed = 0  # 1: the clock runs (arm); 2: ended too (disarm; observers were told)
        self._started = _monotonic()
        self._deadline = self._started + config.timeout_ms / 1000.0 if config.timeout_ms else 0.0
        self._observers: tuple[_obs.Observer, ...] = ()
        self._name = ""
        self._plain = True  # no policies, breaker, budgets, checks, observers or ancestors (see _calls)

    # -- reads -----------------------------------------------------------------------------------

    @property
    def chain_id(self) -> str:
        """Unique id of this context (a random per-process prefix and a counter)."""
        return f"{self._chain_prefix}-{self._chain_no:x}"

    @property
    def _reason(self) -> str | None:
        return self._ledger.reason

    @property
    def _lineage(self) -> tuple[ContextState, ...]:
        """(self, parent, ..., root) once nested; empty for a root (no cycle through ``self``)."""
        return (self, *self._above) if self._above else ()

    @property
    def aborted(self) -> bool:
        """True once this context halted, or an ancestor did (which halts this one too)."""
        if self._ledger.reason is not None:
            return True
        if self._up is not None and self._halted_above():
            return True
        return bool(self._deadline) and self._armed != 0 and self._expired()

    @property
    def abort_reason(self) -> str | None:
        if self._ledger.reason is None and self._up is not None:
            self._halted_above()
        self._expired()
        return self._ledger.reason

    @property
    def graph(self) -> ExecutionGraph:
        graph = self._graph
        if graph is None:
            with self._ledger.lock:
                graph = self._graph_locked()
        return graph

    def _graph_locked(self) -> ExecutionGraph:
        if self._graph is None:
            graph = ExecutionGraph(*self._graph_args)
            graph._owner = weakref.ref(self)
            graph._lock = self._ledger.lock
            self._graph = graph
        return self._graph

    def get_partial_result(self) -> Any:
        return self._partial

    def get_events(self) -> list[ExecutionEvent]:
        return list(self._events or ())

    @property
    def soft_limits_passed(self) -> tuple[tuple[str, float], ...]:
        """The soft limits this context has passed, as (dimension, fraction), in order."""
        return tuple(self._ledger.warned or ())

    def get_snapshot(self) -> ExecutionSnapshot:
        self._expired()
        own = self._ledger
        reason, detail, retry_after, status = own.reason, own.detail, own.retry_after, own.http_status
        if reason is None and self._up is not None:
            # A view: an ancestor's halt shows (this context halts at its next call or check), but
            # taking a snapshot changes nothing -- no halt recorded, no observer told.
            level = self._halted_ancestor()
            if level is not None:
                top = level._ledger
                reason, retry_after, status = top.reason, top.retry_after, top.http_status
                detail = f"{label(level)}: {top.detail}"
        with own.lock:
            steps, committed, reserved = own.steps, own.committed, own.reserved
            retries, in_flight = own.retries, own.in_flight
            children = tuple(self._children) if self._children else ()
            warned = tuple(own.warned) if own.warned else ()
        return ExecutionSnapshot(
            step_count=steps, cost_usd_accumulated=committed, cost_usd_reserved=reserved,
            retries_used=retries, in_flight=in_flight, aborted=reason is not None, abort_reason=reason,
            abort_detail=detail, elapsed_ms=(time.monotonic() - self._started) * 1000.0,
            chain_id=self.chain_id, config=self.config, retry_after_s=retry_after,
            events=tuple(self._events or ()), http_status=status, name=self._name,
            children=tuple(child.get_snapshot() for child in children), soft_limits=warned,
        )  # fmt: skip

    def halted_error(self) -> ExecutionHalted:
        """The exception describing this context's halt (reason, snapshot, partial result)."""
        own = self._ledger
        return ExecutionHalted(
            own.reason or HaltReason.CANCELLED.value, self.get_snapshot(), self._partial, own.detail
        )

    # -- events and halts ------------------------------------------------------------------------

    def add_event(self, kind: str, detail: str, **data: Any) -> None:
        self._record_event(ExecutionEvent(kind, detail, data), logging.INFO)

    def _record_event(self, event: ExecutionEvent, level: int) -> None:
        if self._events is None:
            self._events = deque(maxlen=256)
        self._events.append(event)
        logger.log(level, "veronica_mw: %s in context %s: %s", event.kind, self.chain_id, event.detail)
        if _obs._global or self._observers:
            _obs.notify(self._observers, "event", self, event)

    def _abort(
        self, reason: HaltReason, detail: str = "", retry_after: float | None = None, http_status: int = 429
    ) -> None:
        """Halt for ``reason`` unless halted already (the first reason wins). Never under the lock."""
        own = self._ledger
        with own.lock:
            if own.reason is not None:
                return
            own.retry_after = retry_after
            own.http_status = http_status
            own.detail = detail
            own.reason = reason.value
            token = self._token
        logger.debug("veronica_mw: context %s halted: %s %s", self.chain_id, reason.value, detail)
        if _obs._global or self._observers:
            _obs.notify(self._observers, "halted", self, reason.value, detail)
        if token is not None:
            token.cancel(reason.value, detail)

    def _on_deadline(self) -> None:
        self._abort(HaltReason.TIMEOUT, f"timeout_ms={self.config.timeout_ms:g} elapsed")

    def _expired(self) -> bool:
        """Halt for a passed deadline of a running clock (what the pool's timer would do); whether halted."""
        if self._ledger.reason is None and self._armed and self._deadline and _monotonic() >= self._deadline:
            self._on_deadline()
        return self._ledger.reason is not None

    def _inherit(self, level: ContextState) -> None:
        """Halt because the ancestor ``level`` halted (same reason, detail naming it)."""
        top = level._ledger
        if top.reason is None or self._ledger.reason is not None:
            return
        self._abort(HaltReason(top.reason), f"{label(level)}: {top.detail}", top.retry_after, top.http_status)

    def _halted_now(self) -> bool:
        """Whether halted, once the lineage's passed deadlines fired (a timer may not be armed)."""
        now = _monotonic()
        for level in (*reversed(self._above), self):
            if level._ledger.reason is None and level._deadline and now >= level._deadline:
                level._on_deadline()
        if self._up is not None:
            self._halted_above()
        return self._ledger.reason is not None

    def _halted_ancestor(self) -> ContextState | None:
        """The top-most ancestor that has halted, if any."""
        for level in reversed(self._above):
            if level._ledger.reason is not None:
                return level
        return None

    def _halted_above(self) -> bool:
        """True (and this context halted) if an ancestor has halted; the top-most one is named."""
        level = self._halted_ancestor()
        if level is None:
            return False
        self._inherit(level)
        return True

    # -- soft limits -----------------------------------------------------------------------------

    def _soft_limit(self, dimension: str) -> None:
        """``dimension`` reached its gate: each fraction newly passed is an event, a WARNING, ``on_warn``."""
        ledger = self._ledger
        passed, used, limit = ledger.soft_limit(dimension)
        for fraction in passed:
            shown = f"{used:.6f} of {limit:g} USD" if dimension == "cost" else f"{used:g} of {limit:g}"
            detail = f"{dimension} at {shown}: passed {fraction:g} of the limit"
            data = {"dimension": dimension, "fraction": fraction, "used": used, "limit": limit}
            event = ExecutionEvent(
                "soft_limit", detail, {**data, "context": self._name, "chain_id": self.chain_id}
            )
            self._record_event(event, logging.WARNING)
            callback = self._on_warn
            if callback is not None:
                try:
                    callback(event)
                except Exception:  # a warning callback must never break the call that crossed the line
                    logger.exception("veronica_mw: on_warn callback %r failed", callback)

    def _cost_passed(self) -> bool:
        """The committed cost passed its gate: warn if it was a soft limit; True if it was the
        ceiling (the call that got it there is the last)."""
        if self.config.warn_at:
            self._soft_limit("cost")
        return self._ledger.over_ceiling()
