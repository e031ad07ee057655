"""Observers: read-only listeners of what the kernel decided (OpenTelemetry, the audit log).

The kernel stays the single source of truth. Observers are told about a context's life — started,
each call admitted and settled, each event, the halt, ended — *after* the kernel decided it; they
cannot change a decision. They run on the thread that made the decision, outside the context's
lock, so they must be quick (hand work to a queue). An observer that raises is logged and ignored:
observation never breaks a call.

Register one for every context with :func:`add_observer` (OpenTelemetry does), or give one context
(and the contexts nested in it) its own with ``ExecutionContext(..., observers=[...])``.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._node import CallNode
    from .snapshot import ExecutionEvent

# ``ctx`` below is the :class:`~veronica_mw.ExecutionContext` (typed ``Any``: this module is
# below it in the kernel, which the context's module imports). Subclasses annotate it precisely.

logger = logging.getLogger("veronica_mw")


class Observer:
    """Base class with a no-op method per kernel event; override the ones you need."""

    record_bodies: bool = False
    """True for an observer that keeps call bodies: the calls of the contexts it observes then
    collect their request and response text (``CallNode.io``, filled via ``record_io``)."""

    def context_started(self, ctx: Any) -> None:
        """The context was armed (its clock started): first ``with``, or a request's first call."""

    def call_started(self, ctx: Any, node: CallNode) -> None:
        """A call passed every check and is about to run (``node.status == "running"``)."""

    def call_ended(self, ctx: Any, node: CallNode, error: BaseException | None) -> None:
        """An admitted call was settled; ``node.status`` says how (ok, error, halted, interrupted,
        released), ``node.cost_usd`` what it cost, ``error`` what it raised (for ``error``)."""

    def event(self, ctx: Any, event: ExecutionEvent) -> None:
        """The context recorded an event (soft limit, unpriced call, divergence, ...)."""

    def halted(self, ctx: Any, reason: str, detail: str) -> None:
        """The context halted (called once, on the thread that refused the call or timed out)."""

    def context_ended(self, ctx: Any) -> None:
        """The context left its scope (``with`` exit, end of the request); final usage is known."""

    def refused(self, reason: str, detail: str, status: int) -> None:
        """A request or session was refused before it had a context (a tenant budget pool said no,
        or was unavailable); the middleware answers it with HTTP ``status`` (429 or 503). Called on
        the thread handling the request, so the server's request span is current."""


_lock = threading.Lock()
_global: tuple[Observer, ...] = ()


def add_observer(observer: Observer) -> None:
    """Tell ``observer`` about every context in this process (idempotent)."""
    global _global
    if not isinstance(observer, Observer):
        raise TypeError(f"observer must be a veronica_mw.Observer, got {type(observer).__name__}")
    with _lock:
        if observer not in _global:
            _global = (*_global, observer)


def remove_observer(observer: Observer) -> None:
    global _global
    with _lock:
        _global = tuple(o for o in _global if o is not observer)


def global_observers() -> tuple[Observer, ...]:
    return _global


def wants_bodies(observers: tuple[Observer, ...]) -> bool:
    """Whether any of ``observers`` or the global observers keeps call bodies."""
    for observer in _global + observers if observers else _global:
        if observer.record_bodies:
            return True
    return False


def notify(observers: tuple[Observer, ...], method: str, *args: Any) -> None:
    """Call ``method`` on every observer in ``observers`` plus the global ones; never raises."""
    for observer in _global + observers if observers else _global:
        try:
            getattr(observer, method)(*args)
        except Exception:  # an observer must never break the call it observes
            logger.exception("veronica_mw: observer %r failed in %s", observer, method)
