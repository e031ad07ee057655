"""One HTTP request/response exchange under the ASGI middleware.

The exchange wraps the app's ``send`` to know whether the response has started, and decides what
the client finally gets when the request's context halted:

- nothing sent yet: an HTTP 429 problem response instead of whatever the app (or the framework's
  error handling) produced;
- an error response (status >= 500) the app started: it is held back, because frameworks render
  their own 500 for an escaped exception (Starlette's ``ServerErrorMiddleware`` then re-raises,
  Django does not), and swapped for the 429 if the context halted; otherwise it is sent unchanged
  as soon as it is complete;
- a 2xx/3xx/4xx the app chose: always kept (the app handled the halt itself);
- a response already streaming: ended cleanly with an empty final body, and a WARNING is logged.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from time import monotonic
from typing import Any

from ..kernel.circuit_breaker import CircuitBreaker
from ..kernel.config import ExecutionConfig
from ..kernel.context import PendingContext
from ..kernel.exceptions import ExecutionHalted
from ..kernel.execution import ExecutionContext
from ..kernel.parent import BudgetParent
from ._nested_halt import nested_halt, refusal_parts
from .problem import log_halt_after_start, problem_response, usage_headers
from .types import Message, Send

logger = logging.getLogger("veronica_mw")

# A held error response is buffered until the app returns; past this size it is sent as it is,
# so a misbehaving app streaming a huge 500 cannot make the middleware hold it all in memory.
_HOLD_LIMIT = 64 * 1024
_END_OF_BODY: Message = {"type": "http.response.body", "body": b"", "more_body": False}
_build_lock = threading.Lock()  # held only while one request's context is built


class HTTPExchange(PendingContext):
    """Per-request state of the ASGI middleware's HTTP path (created in ``__call__``).

    It is also the request's :class:`PendingContext` -- one object, as this is the per-request
    path: the middleware puts it in the ContextVar, and :meth:`resolve` builds the request's context
    on its first ``get_current_execution_context()`` (any thread or task), or here when a snapshot
    is needed (usage headers). ``ctx`` is None while the request has made no call -- and a request
    that made no call cannot have halted, so every "did it halt?" decision is a None check.
    """

    __slots__ = (
        "path", "live", "_config", "_breaker", "_ledger", "_started", "_send", "_extra", "_usage",
        "started", "finished", "_held", "_held_size", "_options", "_method", "_outer",
    )  # fmt: skip

    def __init__(
        self,
        config: ExecutionConfig,
        breaker: CircuitBreaker | None,
        ledger: BudgetParent | None,
        path: str,
        send: Send,
        extra_headers: Sequence[tuple[bytes, bytes]],
        usage: bool,
        options: dict[str, Any] | None = None,
        method: str | None = None,
        outer: ExecutionContext | None = None,
    ) -> None:
        # No factory for the base class: resolve() below builds the context from these fields.
        self.ctx = None
        self.path = path
        self.live = True  # the app is running: the middleware will remove the context's timer
        self._config = config
        self._breaker = breaker
        self._ledger = ledger
        self._started = monotonic()  # the deadline counts from here, however late the context is built
        self._send = send
        self._extra = extra_headers
        self._usage = usage
        self._options = options  # checks=/policies= of the middleware (shared, built once)
        self.started = False  # a response start has reached the server
        self.finished = False  # ... and its final body too
        self._held: list[Message] | None = None
        self._held_size = 0
        self._method = method  # set when the request is audited
        # The context current around the request (if any): the request's context nests in it.
        self._outer = outer

    def resolve(self) -> ExecutionContext:
        """The request's context, built on the first call (once, thread-safe)."""
        ctx = self.ctx
        if ctx is None:
            with _build_lock:
                ctx = self.ctx
                if ctx is None:
                    breaker, ledger, options = self._breaker, self._ledger, self._options
                    # The parent is always given: looking up the current context here would find
                    # this exchange, which is being resolved. Each keyword argument costs ~0.1 µs.
                    if breaker is None and ledger is None and options is None:
                        ctx = ExecutionContext(self._config, parent=self._outer, name=self.path)
                    elif self._method is None:
                        ctx = ExecutionContext(
                            self._config,
                            circuit_breaker=breaker,
                            budget_parent=ledger,
                            parent=self._outer,
                            name=self.path,
                            **(options or {}),
                        )
                    else:  # audited: the request line, without its query string (never headers)
                        ctx = ExecutionContext(
                            self._config,
                            circuit_breaker=breaker,
                            budget_parent=ledger,
                            attributes={"method": self._method, "path": self.path},
                            parent=self._outer,
                            name=self.path,
                            **(options or {}),
                        )
                    self.ctx = ctx
                    ctx.arm(self._started)  # the deadline counts from the request start
                    # Built once the app has returned (usage headers of a late error response, a task
                    # that outlived the request) the context keeps its deadline but not the timer,
                    # which nothing else would remove. Built by another thread just as the app
                    # returns: whichever of us sees the other removes it.
                    if not self.live:
                        ctx.disarm()
        return ctx

    async def send(self, message: Message) -> None:
        """The ``send`` the app sees."""
        if self.started:
            # Hot path: body chunks of a response already on its way.
            kind = message["type"]
            if (kind == "http.response.body" and not message.get("more_body", False)) or (
                kind == "http.response.pathsend"
            ):
                self.finished = True
            await self._send(message)
            return
        held = self._held
        if held is not None:
            held.append(message)
            self._held_size += len(message.get("body", b""))
            complete = message["type"] == "http.response.body" and not message.get("more_body", False)
            # A complete error response of a context that has not halted is the app's own 500:
            # send it now rather than when the app returns (it may still run background tasks).
            if self._held_size > _HOLD_LIMIT or (complete and self._halted() is None and not self._nested()):
                await self._flush()
            return
        if message["type"] == "http.response.start":
            if message["status"] >= 500:
                self._held = [message]
                return
            self.started = True
            if self._extra or self._usage:
                message = self._with_headers(message)
            await self._send(message)
            return
        await self._send(message)

    def _halted(self) -> ExecutionContext | None:
        """The request's context if it was built and has halted."""
        ctx = self.ctx
        return ctx if ctx is not None and ctx.aborted else None

    def _nested(self) -> bool:
        """Whether a context nested in the request's has halted (its halt is the request's answer)."""
        return nested_halt(self.ctx) is not None

    def _chain_id(self, halt: ExecutionHalted | None) -> str:
        # A context that was never built has no id: log the halt's own (it came from elsewhere).
        ctx = self.ctx
        if ctx is not None:
            return ctx.chain_id
        return halt.snapshot.chain_id if halt is not None and halt.snapshot is not None else "-"

    def _with_headers(self, start: Message) -> Message:
        extra = self._extra
        if self._usage:
            extra = [*extra, *usage_headers(self.resolve().get_snapshot())]
        if not extra:
            return start
        # A copy: the app may reuse its message dict, and its headers list is not ours to grow.
        return {**start, "headers": [*start.get("headers", ()), *extra]}

    async def _flush(self) -> None:
        """Send the held error response as the app produced it."""
        held, self._held = self._held or [], None
        if not held:
            return
        self.started = True
        await self._send(self._with_headers(held[0]))
        for message in held[1:]:
            if message["type"] == "http.response.pathsend" or (
                message["type"] == "http.response.body" and not message.get("more_body", False)
            ):
                self.finished = True
            await self._send(message)

    async def _send_problem(self, halt: ExecutionHalted) -> None:
        self._held = None
        extra = list(self._extra)
        if self._usage:
            extra += usage_headers(self.resolve().get_snapshot())
        # A halt of the request's context, or of one nested in it, is answered with the request's
        # own usage and limits (see _nested_halt).
        reason, snapshot, status, detail = refusal_parts(self.ctx, halt)
        status, headers, body = problem_response(
            reason,
            snapshot=snapshot,
            status=status,
            retry_after_s=halt.retry_after_s,
            detail=detail,
            extra_headers=extra,
        )
        logger.info(
            "veronica_mw: %s halted (%s); answered %d [chain %s]",
            self.path,
            reason,
            status,
            self._chain_id(halt),
        )
        self.started = self.finished = True
        await self._send({"type": "http.response.start", "status": status, "headers": headers})
        await self._send({"type": "http.response.body", "body": body, "more_body": False})

    async def _end_stream(self, reason: str | None, halt: ExecutionHalted | None = None) -> None:
        if self.finished:
            # The response was complete: the halt came from work after it (a background task).
            logger.warning(
                "veronica_mw: %s halted after the response completed (reason=%s) [chain %s]",
                self.path,
                reason,
                self._chain_id(halt),
            )
            return
        self.finished = True
        await self._send(_END_OF_BODY)
        ctx = self.ctx
        detail = ctx.cancellation_token.detail if ctx is not None else (halt.detail if halt else "")
        log_halt_after_start(reason, self.path, self._chain_id(halt), detail)

    async def finish_halted(self, halt: ExecutionHalted) -> None:
        """The app let ``halt`` escape (possibly wrapped): answer 429, or end the stream."""
        if self.started:
            await self._end_stream(halt.reason, halt)
        else:
            await self._send_problem(halt)

    async def finish_failed(self) -> None:
        """The app raised something that is not a halt; the caller re-raises it afterwards."""
        if self.started:
            return
        ctx = self._halted() or nested_halt(self.ctx)
        if ctx is not None:
            # The context (or one nested in it) halted and the app's failure (or the error page
            # already rendered for it) is its consequence: the client learns the real reason.
            await self._send_problem(ctx.halted_error())
        elif self._held is not None:
            await self._flush()

    async def finish(self) -> None:
        """The app returned normally."""
        ctx = self._halted()
        if self.started:
            if not self.finished and ctx is not None:
                await self._end_stream(ctx.abort_reason)
            return
        if ctx is None and self._held is not None:
            ctx = nested_halt(self.ctx)  # a held 500 rendered for a nested context's halt
        if ctx is not None:
            # A held 500 (Django renders the escaped halt itself), or no response at all.
            await self._send_problem(ctx.halted_error())
        elif self._held is not None:
            await self._flush()
