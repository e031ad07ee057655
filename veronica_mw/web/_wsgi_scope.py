"""The request-lifetime pieces shared by the WSGI middleware and the Django middleware: a context
that lives as long as the response body, body chunks pulled with that context current, and the
shared 429 as WSGI status line and headers."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from http import HTTPStatus
from typing import Any

from ..kernel.cancellation import CancellationToken
from ..kernel.circuit_breaker import CircuitBreaker
from ..kernel.config import ExecutionConfig
from ..kernel.context import PendingContext, current_context
from ..kernel.exceptions import ExecutionHalted
from ..kernel.execution import ExecutionContext
from ..kernel.parent import BudgetParent
from ._nested_halt import refusal_parts
from .problem import find_halt, log_halt_after_start, problem_response, usage_headers

logger = logging.getLogger("veronica_mw")

END = object()
"""Returned by :func:`next_in_context` when the body is done."""
Headers = list[tuple[str, str]]


def wsgi_headers(raw: Iterable[tuple[bytes, bytes]]) -> Headers:
    """The shared helper's byte headers as the native strings WSGI wants."""
    return [(name.decode("latin-1"), value.decode("latin-1")) for name, value in raw]


def status_line(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Error"


def status_code(status: str | None) -> int:
    """The numeric code of a WSGI status line; 500 for a missing or malformed one (the server's answer)."""
    try:
        return int(status.split(None, 1)[0]) if status else 500
    except (ValueError, AttributeError):
        return 500


class RequestContext(ExecutionContext):
    """A WSGI or Django request's context: constructed when the request starts, armed on first use.

    The object is built eagerly because ``environ["veronica.context"]`` (``request.META`` under
    Django) must be the request's real :class:`ExecutionContext`, and a dict cannot hold a value
    built on demand. What a request that never makes a call does not pay for is the deadline
    timer: it is scheduled, counting from the request start, the first time the context is used --
    resolved through the ContextVar (:meth:`RequestScope.resolve`) or asked for its cancellation
    token (how code learns of a timeout while it makes no call). Calls made through the environ
    entry are checked against the same deadline either way.
    """

    # ``_over``, not the base class's ``_ended``: that one says observers were told the context
    # ended, and a shadowing slot would make ``disarm()`` skip telling them.
    __slots__ = ("_arm_from", "_over")
    _arm_from: float | None  # the request start until the timer is scheduled
    _over: bool

    def start(self) -> RequestContext:
        """Arm the deadline from the request start (once; never after :meth:`end`); return self."""
        if self._arm_from is not None:
            with _arm_lock:  # the ContextVar and the token may ask at once, from two threads
                started = self._arm_from
                if started is not None:
                    self._arm_from = None
                    self.arm(started)
                    if self._over:  # the request ended (on another thread) while we armed
                        self.disarm()
        return self

    def end(self) -> None:
        """The request is over: remove the deadline timer, and never schedule one again."""
        if self._arm_from is not None and self._observers:  # audited: a request without calls too
            self.start()
        self._over = True
        self._arm_from = None
        self.disarm()

    @property
    def cancellation_token(self) -> CancellationToken:
        self.start()  # a token holder waits for the deadline to fire: it must be armed
        return super().cancellation_token


_arm_lock = threading.Lock()  # held only while a context's timer is scheduled


class RequestScope(PendingContext):
    """The lifetime of one request's context, independent of the thread that happens to end it.

    It is also the request's :class:`PendingContext`: the ContextVar holds it while the app runs,
    and :meth:`resolve` hands out ``ctx`` (a :class:`RequestContext`), arming its timer, so the
    timer exists only for requests that use their context. The ContextVar is set only around each
    call into the app (see :meth:`run`), so nothing stays set on the server thread between two
    ``next()`` calls or after the response; :meth:`end` removes the timer, from any thread.
    """

    __slots__ = ("path",)
    ctx: RequestContext

    def __init__(
        self,
        config: ExecutionConfig,
        breaker: CircuitBreaker | None,
        ledger: BudgetParent | None,
        path: str,
        options: dict[str, Any] | None = None,
        method: str | None = None,
    ) -> None:
        # No factory for the base class: the context exists already, resolve() only arms it.
        # Built before the request's ContextVar is set: inside an entered context it nests there.
        self.ctx = request_context(config, breaker, ledger, path, options, method)
        self.path = path

    def resolve(self) -> RequestContext:
        return self.ctx.start()

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call ``fn`` with this request's context current."""
        token = current_context.set(self)
        try:
            return fn(*args)
        finally:
            current_context.reset(token)

    def end(self) -> None:
        """End the context (removes its deadline timer); idempotent."""
        self.ctx.end()

    def halted_after_start(self, exc: BaseException | None = None) -> None:
        """Log the WARNING for a halt that arrived once the body had started."""
        ctx = self.ctx
        halt = find_halt(exc) if exc is not None else None
        reason = ctx.abort_reason or (halt.reason if halt is not None else None)
        detail = ctx.get_snapshot().abort_detail if ctx.aborted else ""
        if exc is not None and halt is None:
            detail = f"{detail}; app raised {type(exc).__name__}: {exc}".lstrip("; ")
        log_halt_after_start(reason, self.path, ctx.chain_id, detail)


def request_context(
    config: ExecutionConfig,
    breaker: CircuitBreaker | None,
    ledger: BudgetParent | None,
    path: str,
    options: dict[str, Any] | None,
    method: str | None,
) -> RequestContext:
    """A request's :class:`RequestContext` (named by its path), its deadline counting from now."""
    if breaker is None and ledger is None and options is None:
        ctx = RequestContext(config)  # keyword arguments cost 0.2 µs more
    elif method is None:
        # ``options``: the middleware's checks=/policies=/audit= (shared, built once).
        ctx = RequestContext(config, circuit_breaker=breaker, budget_parent=ledger, **(options or {}))
    else:  # audited: the request line, without its query string (never headers)
        attributes = {"method": method, "path": path}
        ctx = RequestContext(
            config, circuit_breaker=breaker, budget_parent=ledger, attributes=attributes, **(options or {})
        )
    # Set here rather than in an __init__ override: one Python frame less per request. The clock
    # read at construction is the request start.
    ctx._arm_from = ctx._started
    ctx._over = False
    ctx._name = path
    return ctx


def halt_refusal(
    ctx: ExecutionContext,
    halt: ExecutionHalted | None,
    path: str,
    extra: Iterable[tuple[str, str]] = (),
    usage: bool = False,
) -> tuple[int, Headers, bytes]:
    """The 429 for a halt before the headers went out, built by the shared problem helper.

    ``extra`` (budget-pool headers) and, with ``usage``, the usage headers go on it as on any
    contained response.
    """
    # The request's halt, a nested context's (with the request's usage), or some other context's.
    reason, snapshot, status, detail = refusal_parts(ctx, halt)
    retry_after = halt.retry_after_s if halt is not None else None
    more: list[tuple[str | bytes, str | bytes]] = list(extra)
    if usage:
        more.extend(usage_headers(ctx.get_snapshot()))
    status, headers, body = problem_response(
        reason,
        snapshot=snapshot,
        config=ctx.config,
        status=status,
        retry_after_s=retry_after,
        detail=detail,
        extra_headers=more,
    )
    logger.info("veronica_mw: %s halted (%s); answered %d [chain %s]", path, reason, status, ctx.chain_id)
    return status, wsgi_headers(headers), body


def next_in_context(scope: RequestScope, it: Iterator[bytes], halted_before: bool) -> Any:
    """The next body chunk, pulled with the request's context current; ``END`` when the body is done.

    Once the headers are out a halt cannot become a 429 any more: it ends the body cleanly (the
    client sees a complete, shorter response) and is logged. ``halted_before`` is True when the
    response was chosen after the halt (the app caught it): that body is the app's and runs to its end.
    """
    ctx = scope.ctx
    if ctx.aborted and not halted_before:
        scope.halted_after_start()
        return END
    token = current_context.set(scope)
    try:
        return next(it, END)
    except Exception as exc:
        if find_halt(exc) is None and not ctx.aborted:
            raise
        scope.halted_after_start(exc)
        return END
    finally:
        current_context.reset(token)
