"""The lifecycle of a context: ``arm`` (start its clock once; the deadline in the shared timeout pool when
someone waits for it), ``disarm`` (the context left its scope), and the cancellation token a
halt cancels -- with the observers' context_started / context_ended."""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable

from . import observer as _obs
from ._state import ContextState
from .cancellation import CancellationToken
from .reasons import HaltReason
from .timeout_pool import SharedTimeoutPool

_monotonic = time.monotonic


def arm(ctx: ContextState, started: float | None) -> None:
    """Start the clock (once). The pool fires the deadline only for someone waiting elsewhere (a
    token holder, an observer): every call and every state read checks it anyway."""
    if ctx._armed:
        return
    if ctx._token is None and not ctx._observers and not _obs._global:
        # Nothing to schedule or tell (the common case): no lock. Two threads arming at once
        # both write a start time (either is right). A token made meanwhile is caught by one
        # side: it is written before ``token`` reads ``_armed``, which is written here before
        # ``_token`` is read again.
        now = _monotonic() if started is None else started
        ctx._started = now
        if ctx._deadline:
            ctx._deadline = now + ctx.config.timeout_ms / 1000.0
        ctx._armed = 1
        if ctx._token is None:
            return
        with ctx._ledger.lock:
            if ctx._deadline and ctx._timer is None and ctx._armed == 1:
                schedule_locked(ctx)
        return
    lock = ctx._ledger.lock
    lock.acquire()  # two threads arming at once must not schedule two timers
    try:
        if ctx._armed:
            return
        ctx._armed = 1
        ctx._started = _monotonic() if started is None else started
        if ctx._deadline:
            ctx._deadline = ctx._started + ctx.config.timeout_ms / 1000.0
            schedule_locked(ctx)
    finally:
        lock.release()
    if _obs._global or ctx._observers:
        _obs.notify(ctx._observers, "context_started", ctx)


def schedule_locked(ctx: ContextState) -> None:
    pool = ctx._pool or SharedTimeoutPool.default()
    ctx._timer = pool.schedule(ctx._deadline, ctx._on_deadline)


def disarm(ctx: ContextState) -> None:
    """Remove the pending deadline from the timeout pool; new calls still halt once it passed."""
    timer = ctx._timer
    if timer is not None:
        ctx._timer = None
        (ctx._pool or SharedTimeoutPool.default()).cancel(timer)
    if ctx._armed == 1:
        ctx._armed = 2
        if _obs._global or ctx._observers:
            _obs.notify(ctx._observers, "context_ended", ctx)


def _on_cancel(ref: weakref.ref[ContextState]) -> Callable[[], None]:
    # Weak: the token is held by its context, so a strong callback would make a reference cycle
    # and leave every context that handed out a token to the garbage collector.
    def cancelled() -> None:
        ctx = ref()
        token = ctx._token if ctx is not None else None
        if ctx is not None and token is not None:
            ctx._abort(HaltReason.CANCELLED, token.detail)

    return cancelled


def token(ctx: ContextState) -> CancellationToken:
    """The context's cancellation token, made on first use (most contexts never need one)."""
    existing = ctx._token
    if existing is not None:
        return existing
    with ctx._ledger.lock:
        if ctx._token is None:
            ctx._token = CancellationToken()
            if ctx._armed == 1 and ctx._deadline and ctx._timer is None:
                schedule_locked(ctx)  # the deadline must now fire for the holder
        made = ctx._token
    made.add_callback(_on_cancel(weakref.ref(ctx)))
    own = ctx._ledger
    if own.reason is not None:  # halted before anyone asked for the token
        made.cancel(own.reason, own.detail)
    up = ctx._up
    if up is not None:  # a token holder learns of an ancestor's halt when it happens
        token(up).add_callback(lambda: ctx._halted_above())
    return made
