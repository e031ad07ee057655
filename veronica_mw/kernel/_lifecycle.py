"""The lifecycle of an :class:`~veronica_mw.ExecutionContext`: ``with``/``async with`` (current context,
nesting in the enclosing one on first entry), and the clock (``arm``/``disarm``: the deadline in
the shared timeout pool, and the observers' context_started/context_ended)."""

from __future__ import annotations

import threading
import time
from collections import deque
from contextvars import Token
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from . import _nesting
from . import observer as _obs
from .context import current_context, enclosing_context
from .timeout_pool import SharedTimeoutPool, TimeoutHandle

if TYPE_CHECKING:
    from .config import ExecutionConfig
    from .execution import ExecutionContext

_C = TypeVar("_C", bound="Lifecycle")
_current = current_context.get
_monotonic = time.monotonic
_adopt_lock = threading.Lock()  # held only while an entered context is made a child


class Lifecycle:
    """Mixin of :class:`~veronica_mw.ExecutionContext`; the slots live there."""

    if not TYPE_CHECKING:
        __slots__ = ()

    if TYPE_CHECKING:
        config: ExecutionConfig
        _lock: threading.Lock
        _lineage: tuple[ExecutionContext, ...]
        _var_tokens: Token[Any] | list[Token[Any]] | None
        _token: Any
        _reason: str | None
        _armed: int
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
        if not self._armed:
            self.arm()
        token = current_context.set(self)  # type: ignore[arg-type]  # always an ExecutionContext
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
                self._lineage = _nesting.ROOT
                return
            _nesting.bind(me, enclosing)

    def arm(self: _C, started: float | None = None) -> _C:
        """Start the clock (once): the deadline counts from ``started`` (a ``time.monotonic()``
        value, default now); the shared timeout pool fires it when someone waits for it (a
        cancellation-token holder, an observer), every call and state read checks it anyway.
        ``with`` does this on entry; middlewares that build a context lazily pass the request's
        start time."""
        if self._armed:
            return self
        if self._token is None and not self._observers and not _obs._global:
            # Nothing to schedule or tell (the common case): no lock. Two threads arming at once
            # both write a start time (either is right). A token made meanwhile is caught by one
            # side: it is written before cancellation_token reads ``_armed``, which is written
            # here before ``_token`` is read again.
            now = _monotonic() if started is None else started
            self._started = now
            if self._deadline:
                self._deadline = now + self.config.timeout_ms / 1000.0
            self._armed = 1
            if self._token is None:
                return self
            with self._lock:
                if self._deadline and self._timer is None and self._armed == 1:
                    self._schedule_locked()
            return self
        lock = self._lock
        lock.acquire()  # two threads arming at once must not schedule two timers
        try:
            if self._armed:
                return self
            self._armed = 1
            self._started = time.monotonic() if started is None else started
            if self._deadline:
                self._deadline = self._started + self.config.timeout_ms / 1000.0
                # Every call and every state read checks the deadline itself; the pool only has
                # to fire it for someone waiting elsewhere: a token holder or an observer.
                if self._token is not None or self._observers or _obs._global:
                    self._schedule_locked()
        finally:
            lock.release()
        if _obs._global or self._observers:
            _obs.notify(self._observers, "context_started", self)
        return self

    def _schedule_locked(self) -> None:
        pool = self._pool or SharedTimeoutPool.default()
        self._timer = pool.schedule(self._deadline, self._on_deadline)

    def _expired(self) -> bool:
        """Halt for the deadline if the clock runs (armed), it has passed and nothing fired it yet
        (what the pool's timer would have done); whether halted."""
        if self._reason is None and self._armed and self._deadline and time.monotonic() >= self._deadline:
            self._on_deadline()
        return self._reason is not None

    def disarm(self) -> None:
        """Remove the pending deadline from the timeout pool (the context left its scope). New
        calls still halt once the deadline has passed; only the pool entry goes."""
        timer = self._timer
        if timer is not None:
            self._timer = None
            (self._pool or SharedTimeoutPool.default()).cancel(timer)
        if self._armed == 1:
            self._armed = 2
            if _obs._global or self._observers:
                _obs.notify(self._observers, "context_ended", self)

    async def __aenter__(self: _C) -> _C:
        return self.__enter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(exc_type, exc, tb)
