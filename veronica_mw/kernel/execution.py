"""ExecutionContext: the chain-level containment boundary (G1–G3, G5) and its public API.

Its state is :class:`~._state.ContextState`, its calls :class:`~._api.CallAPI`; this module adds
the ``with`` lifecycle, the family (parent, children) and the ContextVar of the current context
(re-exported by :mod:`.context`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from enum import Enum
from types import TracebackType
from typing import Any

from . import _lifecycle
from . import observer as _obs
from ._api import CallAPI
from ._control import OutputVerifier
from ._options import configure
from ._tree import bind, format_tree
from .cancellation import CancellationToken
from .circuit_breaker import CircuitBreaker
from .config import ExecutionConfig
from .parent import BudgetParent
from .policy import PolicyPipeline
from .snapshot import ExecutionEvent
from .timeout_pool import SharedTimeoutPool


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
_adopt_lock = threading.Lock()  # held only while an entered context is made a child
current_context: ContextVar[ExecutionContext | PendingContext | None] = ContextVar(
    "veronica_mw_context", default=None
)
_current = current_context.get


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


class _Parent(Enum):
    CURRENT = "the current context"


_CURRENT = _Parent.CURRENT


class ExecutionContext(CallAPI):
    """One agent run, request or session: every call through it is checked against its limits.

    Usable as ``with``/``async with`` (sets the current context and arms the timeout) or handed
    around un-entered. Thread- and task-safe; one lock (its ledger's) guards the counters.
    ``checks``: output checks every model call's result must pass before it is used (see
    ``veronica_mw.control``). ``observers`` are told about this context's life (see
    :mod:`veronica_mw.kernel.observer`); ``audit`` is one more of them (a
    :class:`veronica_mw.AuditLog`). ``attributes`` describe the context to observers (the
    middlewares put the request's ``method`` and ``path`` there).

    ``parent``: by default the context current when this one is created (or, if none was, when it
    is first entered, before any call); its calls then also count in that context and every
    ancestor, and an ancestor's halt halts it. ``parent=ctx`` binds explicitly; ``parent=None``
    detaches: the context escapes the enclosing limits (use it only for work that must outlive
    them). ``name`` labels the context in snapshots and :meth:`tree`. ``on_warn(event)`` is called
    for each soft limit passed (``ExecutionConfig.warn_at``); children inherit the parent's
    ``on_warn``, observers, circuit breaker and tenant budget (not ``on_limit``: see AskForMore).
    """

    __slots__ = ()

    def __init__(
        self, config: ExecutionConfig, pipeline: PolicyPipeline | None = None,
        circuit_breaker: CircuitBreaker | None = None, *, budget_parent: BudgetParent | None = None,
        graph_capacity: int = 10_000, divergence_threshold: int = 25, halt_on_divergence: bool = False,
        timeout_pool: SharedTimeoutPool | None = None, observers: Iterable[_obs.Observer] = (),
        checks: Iterable[Any] | OutputVerifier | None = None, audit: _obs.Observer | None = None,
        attributes: Mapping[str, str] | None = None,
        parent: ExecutionContext | None | _Parent = _Parent.CURRENT, name: str = "",
        on_warn: Callable[[ExecutionEvent], Any] | None = None, on_limit: Any = None,
    ) -> None:  # fmt: skip
        configure(
            self, config, pipeline, circuit_breaker, budget_parent, graph_capacity, divergence_threshold,
            halt_on_divergence, timeout_pool, observers, checks, audit, attributes, name, on_warn, on_limit,
        )  # fmt: skip
        if parent is _CURRENT:
            if _current() is not None:
                enclosing = enclosing_context()
                if enclosing is not None:
                    bind(self, enclosing)
        elif parent is None:
            self._bound = True  # a root for good
        elif isinstance(parent, ExecutionContext):
            bind(self, parent)
        else:
            raise TypeError(f"parent must be an ExecutionContext or None, got {type(parent).__name__}")

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> ExecutionContext:
        if not self._bound and _current() is not None:
            self._adopt()
        if not self._armed:
            self.arm()
        token = current_context.set(self)
        tokens = self._var_tokens
        if tokens is None:  # entered once (the common case): the token itself, no list
            self._var_tokens = token
        elif type(tokens) is list:
            tokens.append(token)
        else:
            self._var_tokens = [tokens, token]  # type: ignore[list-item]
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        tokens = self._var_tokens
        if type(tokens) is list:
            if not tokens:
                raise RuntimeError("ExecutionContext exited more often than it was entered")
            current_context.reset(tokens.pop())
            if tokens:
                return
        elif tokens is None:
            raise RuntimeError("ExecutionContext exited more often than it was entered")
        else:
            current_context.reset(tokens)  # type: ignore[arg-type]
        self._var_tokens = None
        if self._timer is None and self._armed == 1 and not self._observers and not _obs._global:
            self._armed = 2  # disarm() with nothing to cancel or tell, written out
            return
        self.disarm()

    async def __aenter__(self) -> ExecutionContext:
        return self.__enter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def _adopt(self) -> None:
        """Entered with no parent: nest in the current context, if this one has made no call yet."""
        enclosing = enclosing_context()
        if enclosing is None or enclosing is self or self in enclosing._above:
            return
        with _adopt_lock:
            if self._bound:
                return
            own = self._ledger
            if own.steps or own.retries or own.in_flight or own.committed or self._children:
                self._bound = True  # already spent as a root: its past calls were never checked above
                return
            bind(self, enclosing)

    def arm(self, started: float | None = None) -> ExecutionContext:
        """Start the clock (once) at ``started`` (a ``time.monotonic()`` value, default now); ``with``
        does it on entry, middlewares that build a context lazily pass the request's start."""
        _lifecycle.arm(self, started)
        return self

    def disarm(self) -> None:
        """Remove the pending deadline from the timeout pool; new calls still halt once it passed."""
        _lifecycle.disarm(self)

    @property
    def cancellation_token(self) -> CancellationToken:
        """A token cancelled on any halt (limit, timeout, cancel); cancelling it halts the context.

        Its callbacks are how code blocked elsewhere (a WebSocket receive, a worker) learns of a
        halt; they run on the thread that halted the context (the timeout pool's, for timeouts).
        """
        return _lifecycle.token(self)

    # -- the family ------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def parent(self) -> ExecutionContext | None:
        """The enclosing context whose limits this one's calls also count against (None: a root)."""
        return self._up  # type: ignore[return-value]  # always an ExecutionContext

    @property
    def children(self) -> list[ExecutionContext]:
        """The contexts nested in this one (the most recent 256), oldest first."""
        return list(self._children or ())  # type: ignore[arg-type]

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
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        config, own = self.config, self._ledger
        with own.lock:
            cost_left = max(0.0, config.max_cost_usd - own.committed - own.reserved)
            steps_left = max(0, config.max_steps - own.steps)
            retries_left = max(0, config.max_retries_total - own.retries)
        if timeout_ms is None:
            # Zero would mean "no deadline"; this context's deadline still applies to the child.
            left = (self._deadline - _lifecycle._monotonic()) * 1000.0 if self._deadline else 0
            timeout_ms = max(0.0, left) if self._deadline else 0
        limits = ExecutionConfig(
            max_cost_usd=cost_left if max_cost_usd is None else max_cost_usd,
            max_steps=steps_left if max_steps is None else max_steps,
            max_retries_total=retries_left if max_retries_total is None else max_retries_total,
            timeout_ms=timeout_ms,
            warn_at=config.warn_at,
        )
        return ExecutionContext(limits, parent=self, name=name)

    def tree(self, *, ascii: bool = False) -> str:
        """This context and the ones nested in it, one line each: name, steps, cost / limit, status."""
        return format_tree(self.get_snapshot(), ascii=ascii)
