"""ExecutionContext: the chain-level containment boundary (G1–G3, G5) and its two-phase API.

Every call goes through :meth:`ExecutionContext.begin_call`, which checks every limit and reserves
one step plus the call's cost hint under one lock, then through exactly one settle of the returned
:class:`~veronica_mw.kernel.graph.CallNode` (``commit``/``fail``/``release``). Pricing, policies, the circuit
breaker and a parent budget are consulted outside that lock. Any halt is terminal: the reason is
stored once in the context's cancellation token and every later call is refused before it runs.

Contexts nest: one created (or first entered) while another is current is its child, and every
call of the child also counts in each ancestor (:mod:`._nesting`); ``parent=None`` detaches.
"""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping
from contextvars import Token
from enum import Enum
from types import MappingProxyType
from typing import Any

from . import _nesting
from . import observer as _obs
from ._ainline import AsyncInlineCalls
from ._async_ledger import AsyncLedger
from ._calls import CallAPI
from ._control import OutputVerifier, build_verifier
from ._ledger import Ledger
from ._lifecycle import Lifecycle
from ._soft_limits import EPSILON as _EPSILON
from ._soft_limits import INF as _INF
from ._soft_limits import first_gates
from ._tree import Family
from ._verdicts import Verdicts
from .cancellation import CancellationToken
from .circuit_breaker import CircuitBreaker
from .config import DEFAULT_OPTIONS, ExecutionConfig, WrapOptions
from .context import current_context, enclosing_context
from .exceptions import ExecutionHalted
from .graph import CallNode, ExecutionGraph
from .parent import AsyncBudgetParent, BudgetParent
from .policy import PolicyPipeline
from .reasons import HaltReason
from .snapshot import ExecutionEvent, ExecutionSnapshot
from .timeout_pool import SharedTimeoutPool, TimeoutHandle

logger = logging.getLogger("veronica_mw")
# chain ids: a random per-process prefix plus a counter. os.urandom per context costs several µs
# on some kernels; this is unique per context and, with the prefix, across processes.
_chain_prefix = secrets.token_hex(6)
_chain_counter = itertools.count(1)
_NO_ATTRIBUTES: Mapping[str, str] = MappingProxyType({})


def _new_chain_prefix() -> None:
    global _chain_prefix, _chain_counter
    _chain_prefix = secrets.token_hex(6)
    _chain_counter = itertools.count(1)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_chain_prefix)


def _on_cancel(ref: weakref.ref[ExecutionContext]) -> Callable[[], None]:
    # Weak: the token is held by its context, so a strong callback would make a reference cycle
    # and leave every context that handed out a token to the garbage collector.
    def cancelled() -> None:
        ctx = ref()
        token = ctx._token if ctx is not None else None
        if ctx is not None and token is not None:
            ctx._abort(HaltReason.CANCELLED, token.detail)

    return cancelled


class _Parent(Enum):
    CURRENT = "the current context"


_CURRENT = _Parent.CURRENT  # a module global: faster to test than the enum attribute
_monotonic = time.monotonic


_current = current_context.get
_Token = Token[Any]  # of current_context


class ExecutionContext(Lifecycle, Ledger, AsyncLedger, Verdicts, AsyncInlineCalls, CallAPI, Family):
    """One agent run, request or session: every call through it is checked against its limits.

    Usable as ``with``/``async with`` (sets the current context and arms the timeout) or handed
    around un-entered. Thread- and task-safe; one lock guards the counters. ``checks``: output
    checks every model call's result must pass before it is used (see ``veronica_mw.control``).

    ``observers`` are told about this context's life (see :mod:`veronica_mw.kernel.observer`);
    ``audit`` is one more of them (a :class:`veronica_mw.AuditLog`). ``attributes`` describe the
    context to observers (the middlewares put the request's ``method`` and ``path`` there).

    ``parent``: by default the context current when this one is created (or, if none was, when it
    is first entered, before any call); its calls then also count in that context and every
    ancestor, and an ancestor's halt halts it. ``parent=ctx`` binds explicitly; ``parent=None``
    detaches: the context escapes the enclosing limits (use it only for work that must outlive
    them). ``name`` labels the context in snapshots and :meth:`tree`. ``on_warn(event)`` is called
    for each soft limit passed (``ExecutionConfig.warn_at``); children inherit the parent's
    ``on_warn``, observers, circuit breaker and tenant budget.
    """

    __slots__ = (
        "config",
        "_chain_prefix",
        "_chain_no",
        "_reason",
        "_plain",
        "_name",
        "_lock",
        "_graph",
        "_steps",
        "_committed",
        "_reserved",
        "_in_flight",
        "_partial",
        "_var_tokens",
        "_armed",
        "_started",
        "_deadline",
        "_observers",
        "_down",
        "_budgets",
        "_cost_gate",
        "_step_gate",
        "_warn_retries",
        "__weakref__",
        "__dict__",  # the rarely set state below: its class-level default until first written
    )

    # Defaults of state most contexts never change: not stored per context at construction (an
    # instance dict appears only when one is written: a halt, a token, an event, a keyed call, a
    # parent...). Construction is on every request's path.
    _detail: str = ""
    _pipeline: PolicyPipeline | None = None
    _breaker: CircuitBreaker | None = None
    _parent: BudgetParent | None = None
    _aparent: AsyncBudgetParent | None = None
    _token: CancellationToken | None = None
    _graph_args: tuple[int, int] = (10_000, 25)
    _halt_on_divergence: bool = False
    _retries: int = 0
    _retry_after: float | None = None
    _http_status: int = 429
    _events: deque[ExecutionEvent] | None = None
    _open_keys: dict[Hashable, CallNode] | None = None
    _pool: SharedTimeoutPool | None = None
    _timer: TimeoutHandle | None = None
    attributes: Mapping[str, str] = _NO_ATTRIBUTES
    _verifier: OutputVerifier | None = None
    _up: ExecutionContext | None = None
    # (): no parent yet (the first ``with`` may still nest it); _nesting.ROOT: a root for good;
    # (self, parent, ..., root): nested.
    _lineage: tuple[ExecutionContext, ...] = ()
    _children: deque[ExecutionContext] | None = None
    _on_warn: Callable[[ExecutionEvent], Any] | None = None
    _warned: list[tuple[str, float]] | None = None

    def __init__(
        self,
        config: ExecutionConfig,
        pipeline: PolicyPipeline | None = None,
        circuit_breaker: CircuitBreaker | None = None,
        *,
        budget_parent: BudgetParent | None = None,
        graph_capacity: int = 10_000,
        divergence_threshold: int = 25,
        halt_on_divergence: bool = False,
        timeout_pool: SharedTimeoutPool | None = None,
        observers: Iterable[_obs.Observer] = (),
        checks: Iterable[Any] | OutputVerifier | None = None,
        audit: _obs.Observer | None = None,
        attributes: Mapping[str, str] | None = None,
        parent: ExecutionContext | None | _Parent = _Parent.CURRENT,
        name: str = "",
        on_warn: Callable[[ExecutionEvent], Any] | None = None,
    ) -> None:
        if not isinstance(config, ExecutionConfig):
            raise TypeError(f"config must be an ExecutionConfig, got {type(config).__name__}")
        if pipeline is not None and not isinstance(pipeline, PolicyPipeline):
            raise TypeError(f"pipeline must be a PolicyPipeline, got {type(pipeline).__name__}")
        if circuit_breaker is not None and not callable(getattr(circuit_breaker, "check", None)):
            raise TypeError("circuit_breaker must have check()/record_success()/record_failure()")
        self._observers: tuple[_obs.Observer, ...] = ()
        if observers:
            self._observers = tuple(observers)
            for observer in self._observers:
                if not isinstance(observer, _obs.Observer):
                    raise TypeError(f"observers must be veronica_mw.Observer instances, got {observer!r}")
        if audit is not None:
            # The audit log is an observer like any other: the kernel knows nothing of files.
            if not isinstance(audit, _obs.Observer):
                raise TypeError(f"audit must be a veronica_mw.AuditLog (an Observer), got {audit!r}")
            if audit not in self._observers:
                self._observers = (*self._observers, audit)
        if attributes is not None:
            if not isinstance(attributes, Mapping):
                raise TypeError(f"attributes must be a mapping, got {type(attributes).__name__}")
            self.attributes = MappingProxyType(dict(attributes))
        if checks:
            self._verifier = build_verifier(checks)
        self.config = config
        # The id is formatted on demand; the token is made on demand (most contexts never need one).
        self._chain_prefix = _chain_prefix
        self._chain_no = next(_chain_counter)
        self._reason: str | None = None
        if pipeline:
            self._pipeline = pipeline
        if circuit_breaker is not None:
            self._breaker = circuit_breaker
        if budget_parent is not None:
            self._parent = budget_parent
            # The coroutine API awaits a parent that can answer without blocking (a Redis pool);
            # one whose sync answers never wait for I/O (``blocking_free``) is simply called.
            if (
                callable(getattr(budget_parent, "areserve", None))
                and callable(getattr(budget_parent, "asettle", None))
                and not getattr(budget_parent, "blocking_free", False)
            ):
                self._aparent = budget_parent  # type: ignore[assignment]  # checked right here
        self._lock = threading.Lock()
        if graph_capacity < 1:
            raise ValueError("graph_capacity must be >= 1")
        # The graph, event log and key index are built on first use: many requests make no call.
        self._graph: ExecutionGraph | None = None
        if graph_capacity != 10_000 or divergence_threshold != 25:
            self._graph_args = (graph_capacity, divergence_threshold)
        if halt_on_divergence:
            self._halt_on_divergence = True
        self._steps = 0
        self._committed = 0.0
        self._reserved = 0.0
        self._in_flight = 0
        self._partial: Any = None
        if timeout_pool is not None:
            self._pool = timeout_pool
        # The ContextVar token of each ``with`` (a list only while entered more than once).
        self._var_tokens: _Token | list[_Token] | None = None
        self._armed = 0  # 1: the clock runs (arm); 2: ended too (disarm; observers were told)
        self._started = _monotonic()
        self._deadline = self._started + config.timeout_ms / 1000.0 if config.timeout_ms else 0.0
        if name.__class__ is not str:
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        if on_warn is not None and not callable(on_warn):
            raise TypeError("on_warn must be callable (event) -> None")
        self._name = name  # a slot: request contexts are named (their path)
        if on_warn is not None:
            self._on_warn = on_warn
        if config.warn_at:
            self._cost_gate, self._step_gate, self._warn_retries = first_gates(config)
        else:  # inlined: the gates are just the limits
            self._cost_gate = config.max_cost_usd + _EPSILON
            self._step_gate = config.max_steps
            self._warn_retries = _INF
        # Nothing outside the kernel sees a call's node: the call forms run inline (see _inline).
        # Nesting (below, or at the first ``with``) makes a context non-plain (_nesting.bind).
        self._plain = not (
            pipeline or circuit_breaker is not None or budget_parent is not None or self._observers or checks
        )
        if parent is _CURRENT:
            if _current() is not None:
                enclosing = enclosing_context()
                if enclosing is not None:
                    _nesting.bind(self, enclosing)
        elif parent is None:
            self._lineage = _nesting.ROOT
        elif isinstance(parent, ExecutionContext):
            _nesting.bind(self, parent)
        else:
            raise TypeError(f"parent must be an ExecutionContext or None, got {type(parent).__name__}")

    # -- state -----------------------------------------------------------------------------------

    @property
    def chain_id(self) -> str:
        """Unique id of this context (a random per-process prefix and a counter)."""
        return f"{self._chain_prefix}-{self._chain_no:x}"

    @property
    def aborted(self) -> bool:
        """True once this context halted, or an ancestor did (which halts this one too)."""
        if self._reason is not None:
            return True
        if self._up is not None and _nesting.halted_above(self):
            return True
        return bool(self._deadline) and self._armed != 0 and self._expired()

    @property
    def abort_reason(self) -> str | None:
        if self._reason is None and self._up is not None:
            _nesting.halted_above(self)
        self._expired()
        return self._reason

    @property
    def cancellation_token(self) -> CancellationToken:
        """A token cancelled on any halt (limit, timeout, cancel); cancelling it halts the context.

        Its callbacks are how code blocked elsewhere (a WebSocket receive, a worker) learns of a
        halt; they run on the thread that halted the context (the timeout pool's, for timeouts).
        """
        token = self._token
        if token is None:
            with self._lock:
                if self._token is None:
                    self._token = CancellationToken()
                    if self._armed == 1 and self._deadline and self._timer is None:
                        self._schedule_locked()  # the deadline must now fire for the holder
                token = self._token
            token.add_callback(_on_cancel(weakref.ref(self)))
            if self._reason is not None:  # halted before anyone asked for the token
                token.cancel(self._reason, self._detail)
            up = self._up
            if up is not None:  # a token holder learns of an ancestor's halt when it happens
                up.cancellation_token.add_callback(lambda: _nesting.halted_above(self))
        return token

    @property
    def graph(self) -> ExecutionGraph:
        graph = self._graph
        if graph is None:
            with self._lock:
                graph = self._graph_locked()
        return graph

    def _graph_locked(self) -> ExecutionGraph:
        if self._graph is None:
            graph = ExecutionGraph(*self._graph_args)
            graph._owner = weakref.ref(self)
            self._graph = graph
        return self._graph

    def get_partial_result(self) -> Any:
        return self._partial

    def get_events(self) -> list[ExecutionEvent]:
        return list(self._events or ())

    def get_snapshot(self) -> ExecutionSnapshot:
        self._expired()
        reason, detail, retry_after, status = self._reason, self._detail, self._retry_after, self._http_status
        if reason is None and self._up is not None:
            # A view: an ancestor's halt shows (this context halts at its next call or check), but
            # taking a snapshot changes nothing -- no halt recorded, no observer told.
            level = _nesting.halted_ancestor(self)
            if level is not None:
                reason, retry_after, status = level._reason, level._retry_after, level._http_status
                detail = f"{_nesting.label(level)}: {level._detail}"
        with self._lock:
            steps, committed, reserved = self._steps, self._committed, self._reserved
            retries, in_flight = self._retries, self._in_flight
            children = tuple(self._children) if self._children else ()
            warned = tuple(self._warned) if self._warned else ()
        return ExecutionSnapshot(
            step_count=steps,
            cost_usd_accumulated=committed,
            cost_usd_reserved=reserved,
            retries_used=retries,
            in_flight=in_flight,
            aborted=reason is not None,
            abort_reason=reason,
            abort_detail=detail,
            elapsed_ms=(time.monotonic() - self._started) * 1000.0,
            chain_id=self.chain_id,
            config=self.config,
            retry_after_s=retry_after,
            events=tuple(self._events or ()),
            http_status=status,
            name=self._name,
            children=tuple(child.get_snapshot() for child in children),
            soft_limits=warned,
        )

    def halted_error(self) -> ExecutionHalted:
        """The exception describing this context's halt (reason, snapshot, partial result)."""
        return ExecutionHalted(
            self._reason or HaltReason.CANCELLED.value,
            self.get_snapshot(),
            self._partial,
            self._detail,
        )

    def check(self) -> None:
        """Raise :class:`ExecutionHalted` if this context (or an ancestor) has halted (takes no step)."""
        if self._up is not None:
            _nesting.check_deadlines(self)
            _nesting.halted_above(self)
        elif self._reason is None and self._deadline and time.monotonic() >= self._deadline:
            self._on_deadline()
        if self._reason is not None:
            raise self.halted_error()

    def cancel(self, detail: str = "") -> None:
        """Halt with reason ``cancelled``; ``detail`` goes to the log."""
        if detail:
            logger.info("veronica_mw: context %s cancelled: %s", self.chain_id, detail)
        self._abort(HaltReason.CANCELLED, detail)

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
        """Halt for ``reason`` unless already halted (the first reason wins). Never call it while
        holding ``self._lock``: it takes the lock and then runs cancellation callbacks."""
        with self._lock:
            if self._reason is not None:
                return
            if retry_after is not None:
                self._retry_after = retry_after
            self._http_status = http_status
            self._detail = detail
            self._reason = reason.value
            token = self._token
        logger.debug("veronica_mw: context %s halted: %s %s", self.chain_id, reason.value, detail)
        if _obs._global or self._observers:
            _obs.notify(self._observers, "halted", self, reason.value, detail)
        if token is not None:
            token.cancel(reason.value, detail)

    def _on_deadline(self) -> None:
        self._abort(HaltReason.TIMEOUT, f"timeout_ms={self.config.timeout_ms:g} elapsed")

    # -- two-phase API ---------------------------------------------------------------------------

    def begin_call(
        self,
        kind: str,
        options: WrapOptions | None = None,
        *,
        key: Hashable | None = None,
        parent_id: int | None = None,
        arguments: Any = None,
        editable: bool | Callable[[Any], Any] = False,
    ) -> CallNode:
        """Reserve one step (and the cost hint) for a call about to run, or raise ExecutionHalted.

        ``key`` identifies the call across several hooks that all see it (e.g. a LangChain run
        id): while a node with that key is open, the same node is returned and nothing is counted
        twice. A tool call that an approval policy gates waits here for the approver, who sees
        ``arguments``; pass ``editable=True`` when you run the tool with ``node.edited_arguments``
        if set (or a function raising TypeError/ValueError for edits that do not fit the tool). A
        rejection raises :class:`ExecutionHalted` (``policy_denied``) or
        :class:`~veronica_mw.ToolCallRejected` (answer the agent with its message). Async code
        uses :meth:`abegin_call`, which waits without blocking the event loop.
        """
        node = self._begin(kind, options or DEFAULT_OPTIONS, key, parent_id)
        if node is None:
            raise self.halted_error()
        if node._gates:
            self._approve(node, arguments, editable)
        return node

    async def abegin_call(
        self,
        kind: str,
        options: WrapOptions | None = None,
        *,
        key: Hashable | None = None,
        parent_id: int | None = None,
        arguments: Any = None,
        editable: bool | Callable[[Any], Any] = False,
    ) -> CallNode:
        """:meth:`begin_call` for async code: an approval and an async parent budget's ``areserve``
        are awaited, never waited for in a thread or blocking the loop; settle the node with
        ``acommit``/``afail``/``arelease``."""
        node = await self._abegin(kind, options or DEFAULT_OPTIONS, key, parent_id)
        if node is None:
            raise self.halted_error()
        if node._gates:
            await self._agate(node, arguments, editable)
        return node

    def record_retry(self, exc: BaseException | None = None) -> bool:
        """Draw one retry from the chain-wide budget; False (and halt) when it is spent."""
        if self._up is not None:
            return _nesting.record_retry(self, exc)
        with self._lock:
            allowed = self._retries < self.config.max_retries_total
            if allowed:
                self._retries += 1
        if allowed:
            if self._retries >= self._warn_retries:
                self._soft_limit("retries")
            return True
        name = type(exc).__name__ if exc is not None else "failure"
        self._abort(HaltReason.RETRY_LIMIT, f"{name} after {self.config.max_retries_total} retries")
        return False
