"""The lifecycle of an :class:`~veronica_mw.ExecutionContext`: ``with``/``async with`` (current context,
nesting in the enclosing one on first entry), and the clock (``arm``/``disarm``: the deadline in
the shared timeout pool, and the observers' context_started/context_ended)."""

from __future__ import annotations

import threading
import time
from collections import deque
from contextvars import Token
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from . import _nesting
from . import observer as _obs
from .context import PendingContext, current_context, enclosing_context
from .timeout_pool import SharedTimeoutPool, TimeoutHandle

if TYPE_CHECKING:
    from .config import ExecutionConfig
    from .execution import ExecutionContext

_C = TypeVar("_C", bound="Lifecycle")
_current = current_context.get
_adopt_lock = threading.Lock()  # held only while an entered context is made a child


class Lifecycle:
    """Mixin of :class:`~veronica_mw.ExecutionContext`; the slots live there."""

    if not TYPE_CHECKING:
        __slots__ = ()

    if TYPE_CHECKING:
        config: ExecutionConfig
        _lock: threading.Lock
        _lineage: tuple[ExecutionContext, ...]
        _var_tokens: list[Token[ExecutionContext | PendingContext | None]] | None
        _armed: bool
        _ended: bool
        _started: float
        _deadline: float
        _pool: SharedTimeoutPool | None
        _timer: TimeoutHandle | None
        _observers: tuple[_obs.Observer, ...]
        _steps: int
        _retries: int
        _in_flight: int
        _committed: float
        _children: deque[ExecutionContext] | None

        def _on_deadline(self) -> None: ...

    def __enter__(self: _C) -> _C:
        if not self._lineage and _current() is not None:
            self._adopt()
        self.arm()
        token = current_context.set(self)  # type: ignore[arg-type]  # always an ExecutionContext
        if self._var_tokens is None:
            self._var_tokens = [token]
        else:
            self._var_tokens.append(token)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        tokens = self._var_tokens
        if not tokens:
            raise RuntimeError("ExecutionContext exited more often than it was entered")
        current_context.reset(tokens.pop())
        if not tokens:
            self.disarm()

    def _adopt(self) -> None:
        """Entered with no parent: nest in the current context, if this one has made no call yet."""
        enclosing = enclosing_context()
        me: ExecutionContext = self  # type: ignore[assignment]  # the mixin is part of that class
        if enclosing is None or enclosing is me or _nesting.is_ancestor(me, enclosing):
            return
        with _adopt_lock:
            if self._lineage:
                return
            if self._steps or self._retries or self._in_flight or self._committed or self._children:
                # Already spent as a root: its past calls were never checked above.
                self._lineage = (me,)
                return
            _nesting.bind(me, enclosing)

    def arm(self: _C, started: float | None = None) -> _C:
        """Start the clock (once): the deadline counts from ``started`` (a ``time.monotonic()``
        value, default now) and the shared timeout pool fires it. ``with`` does this on entry;
        middlewares that build a context lazily pass the request's start time."""
        if self._armed:
            return self
        with self._lock:  # two threads arming at once must not schedule two timers
            if self._armed:
                return self
            self._armed = True
            self._started = time.monotonic() if started is None else started
            if self._deadline:
                self._deadline = self._started + self.config.timeout_ms / 1000.0
                pool = self._pool or SharedTimeoutPool.default()
                self._timer = pool.schedule(self._deadline, self._on_deadline)
        if _obs._global or self._observers:
            _obs.notify(self._observers, "context_started", self)
        return self

    def disarm(self) -> None:
        """Remove the pending deadline from the timeout pool (the context left its scope). New
        calls still halt once the deadline has passed; only the pool entry goes."""
        timer = self._timer
        if timer is not None:
            self._timer = None
            (self._pool or SharedTimeoutPool.default()).cancel(timer)
        if not self._ended and self._armed:
            self._ended = True
            if _obs._global or self._observers:
                _obs.notify(self._observers, "context_ended", self)

    async def __aenter__(self: _C) -> _C:
        return self.__enter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(exc_type, exc, tb)
