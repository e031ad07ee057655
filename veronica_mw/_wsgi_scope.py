"""The request-lifetime pieces shared by the WSGI middleware and the Django middleware: a context
that lives as long as the response body, body chunks pulled with that context current, and the
shared 429 as WSGI status line and headers."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterable, Iterator
from http import HTTPStatus
from typing import Any

from ._web import find_halt, log_halt_after_start, problem_response, usage_headers
from .context import current_context
from .exceptions import ExecutionHalted
from .execution import ExecutionContext
from .snapshot import ExecutionSnapshot

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


class RequestScope:
    """The lifetime of one request's context, independent of the thread that happens to end it.

    The request's ContextVar is set only around each call into the app (see :meth:`run`), so nothing
    stays set on the server thread between two ``next()`` calls or after the response. Entering the
    context is then only needed to arm its deadline: a context with ``timeout_ms`` is entered once in
    a private ``contextvars.Context`` and exited in that same Context, so ``close()`` may come from
    any thread; one without a deadline is never entered (that saves two Context switches per request).
    """

    __slots__ = ("ctx", "path", "_arm", "_ended")

    def __init__(self, ctx: ExecutionContext, path: str) -> None:
        self.ctx = ctx
        self.path = path
        self._ended = False
        self._arm: contextvars.Context | None = None
        if ctx.config.timeout_ms:
            self._arm = contextvars.Context()
            self._arm.run(ctx.__enter__)

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call ``fn`` with this request's context current."""
        token = current_context.set(self.ctx)
        try:
            return fn(*args)
        finally:
            current_context.reset(token)

    def end(self) -> None:
        """Exit the context (cancels its deadline); idempotent."""
        if not self._ended:
            self._ended = True
            if self._arm is not None:
                self._arm.run(self.ctx.__exit__, None, None, None)

    def halted_after_start(self, exc: BaseException | None = None) -> None:
        """Log the WARNING for a halt that arrived once the body had started."""
        ctx = self.ctx
        halt = find_halt(exc) if exc is not None else None
        reason = ctx.abort_reason or (halt.reason if halt is not None else None)
        detail = ctx.get_snapshot().abort_detail if ctx.aborted else ""
        if exc is not None and halt is None:
            detail = f"{detail}; app raised {type(exc).__name__}: {exc}".lstrip("; ")
        log_halt_after_start(reason, self.path, ctx.chain_id, detail)


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
    snapshot: ExecutionSnapshot | None
    if ctx.aborted or halt is None:
        reason, snapshot = ctx.abort_reason or "cancelled", ctx.get_snapshot()
    else:  # an ExecutionHalted of some other context escaped the app
        reason, snapshot = halt.reason, halt.snapshot
    retry_after = halt.retry_after_s if halt is not None else None
    more: list[tuple[str | bytes, str | bytes]] = list(extra)
    if usage:
        more.extend(usage_headers(ctx.get_snapshot()))
    status, headers, body = problem_response(
        reason, snapshot=snapshot, config=ctx.config, retry_after_s=retry_after, extra_headers=more
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
    token = current_context.set(ctx)
    try:
        return next(it, END)
    except Exception as exc:
        if find_halt(exc) is None and not ctx.aborted:
            raise
        scope.halted_after_start(exc)
        return END
    finally:
        current_context.reset(token)
