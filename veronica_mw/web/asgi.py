"""ASGI middleware: one :class:`ExecutionContext` per HTTP request and per WebSocket session.

Usage (Starlette / FastAPI)::

    app.add_middleware(VeronicaASGIMiddleware, config=ExecutionConfig(max_cost_usd=0.5, max_steps=20,
                       max_retries_total=3, timeout_ms=30_000))

or wrap any ASGI app (Django's ``get_asgi_application()`` included)::

    application = VeronicaASGIMiddleware(get_asgi_application(), config=...)

Inside the request, ``get_current_execution_context()`` returns the request's context from async
endpoints, sync endpoints run in a threadpool, background tasks and streaming generators (they all
run in copies of the request's ``contextvars`` context). An HTTP request's context is built the
first time something asks for it, its deadline counted from the request start, so a request that
makes no model or tool call costs little more than a bare one. What the client gets when a limit
halts the request is described in :mod:`veronica_mw.web._asgi_http` (HTTP: 429 problem+json, or a
cleanly ended stream) and :mod:`veronica_mw.web._asgi_websocket` (WebSocket: close 1008, or a refusal
before accept). Lifespan and any other scope type pass through untouched.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..instrumentation import instrument as instrument_sdks
from ..kernel.circuit_breaker import CircuitBreaker
from ..kernel.config import ExecutionConfig
from ..kernel.context import PendingContext, current_context
from ..kernel.execution import ExecutionContext
from ..kernel.observer import Observer
from ..kernel.policy import RuntimePolicy
from ._asgi_http import HTTPExchange
from ._asgi_websocket import WebSocketSession, refuse
from .problem import (
    Admission,
    AsyncBudgetPool,
    ConfigFactory,
    ConfigResolver,
    WarnCallback,
    context_options,
    find_halt,
    middleware_active,
    pool_failure,
    refusal_response,
)
from .types import ASGIApp, Receive, Scope, Send

__all__ = ["VeronicaASGIMiddleware"]

_current = current_context.get


class VeronicaASGIMiddleware:
    """Contain every HTTP request and WebSocket session of an ASGI app in its own execution context.

    ``config``: an :class:`ExecutionConfig`, or a callable of the ASGI scope returning one (per
    route, tenant, header...) or None to leave that request uncontained. A callable that raises or
    returns something else is logged and ``default_config`` applies (fail-closed
    ``STRICT_DEFAULT`` — no model or tool call allowed — when not given).
    ``exclude_paths``: paths left uncontained; entries ending in ``/`` are prefixes.
    ``usage_headers``: add ``x-veronica-*`` usage headers to responses that start after the app
    ran (off by default).
    ``budget_pool``: a shared tenant budget; its ``aadmit(scope)`` may refuse the request before the
    app runs, and its ledger becomes the context's budget parent.
    ``circuit_breaker``: one breaker shared by every request's context (an upstream outage halts
    requests with ``circuit_open`` and a ``Retry-After``).
    ``checks``: output checks every model call of every request must pass (``veronica_mw.control``;
    a ``"halt"`` check answers 502). ``policies``: runtime policies for every request's context
    (``DowngradeAt``, ``RequireApproval``, ...; a rejected approval answers 403).
    ``audit``: a :class:`veronica_mw.AuditLog` (any kernel ``Observer``) every request's and
    session's context reports to, with the request's method and path (never headers or query), and
    every budget-pool refusal.
    ``instrument``: patch every installed provider SDK (``veronica_mw.instrument()``: OpenAI,
    Anthropic, LiteLLM, Google GenAI, MCP), once, so direct SDK calls made while a request is
    served are contained too; ``False`` leaves the SDKs alone.
    ``on_warn``: called with the ``soft_limit`` event when a request's context passes one of its
    config's ``warn_at`` fractions (a callback that raises is logged; the request goes on).
    ``on_limit``: a :class:`veronica_mw.AskForMore`: a request at its cost or step limit asks a
    person for more and waits (its connection open, its deadline running) for the decision.
    A request served inside an entered ``ExecutionContext`` (an app called from a test or a job)
    gets a child of that context. Applied twice (wrapped and also added), the inner copy passes
    requests straight through.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        config: ExecutionConfig | ConfigFactory,
        default_config: ExecutionConfig | None = None,
        exclude_paths: Iterable[str] = (),
        usage_headers: bool = False,
        budget_pool: AsyncBudgetPool | None = None,
        circuit_breaker: CircuitBreaker | None = None,
        checks: Iterable[Any] = (),
        policies: Iterable[RuntimePolicy] = (),
        audit: Observer | None = None,
        instrument: bool = True,
        on_warn: WarnCallback | None = None,
        on_limit: Any = None,
    ) -> None:
        self.app = app
        self._options = context_options(checks, policies, audit, on_warn, on_limit)
        self._audit: tuple[Observer, ...] = (audit,) if audit is not None else ()
        self._resolver = ConfigResolver(config, default_config=default_config, exclude_paths=exclude_paths)
        # The common case, one static config and no exclusions, skips resolution per request.
        self._static = config if isinstance(config, ExecutionConfig) and not self._resolver.excludes else None
        if budget_pool is not None and not callable(getattr(budget_pool, "aadmit", None)):
            raise TypeError("budget_pool must have an async aadmit(scope) method")
        self._pool = budget_pool
        self._usage = bool(usage_headers)
        self._breaker = circuit_breaker
        if instrument:
            instrument_sdks()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        # The applied-twice guard (see ``middleware_active``), inlined: it runs on every request.
        if kind == "http":
            outer: Any = _current()  # an entered context around the request becomes its parent
            if isinstance(outer, PendingContext):
                await self.app(scope, receive, send)
            else:
                await self._http(scope, receive, send, outer)
        elif kind == "websocket" and not middleware_active():
            await self._websocket(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _admit(self, scope: Scope, path: str) -> Admission:
        try:
            return await self._pool.aadmit(scope)  # type: ignore[union-attr]
        except Exception as exc:
            return pool_failure(exc, path)

    async def _http(self, scope: Scope, receive: Receive, send: Send, outer: ExecutionContext | None) -> None:
        path: str = scope.get("path", "")
        config = self._static or self._resolver.resolve(scope, path)
        if config is None:
            await self.app(scope, receive, send)
            return
        extra: Sequence[tuple[bytes, bytes]] = ()
        ledger = None
        if self._pool is not None:
            adm = await self._admit(scope, path)
            if not adm.allowed:
                status, headers, body = refusal_response(adm, config, self._audit)
                await send({"type": "http.response.start", "status": status, "headers": headers})
                await send({"type": "http.response.body", "body": body, "more_body": False})
                return
            extra, ledger = _encode(adm.headers), adm.ledger
        # Audited requests carry their method (with the path: the request line without its query).
        method = scope.get("method", "") if self._audit else None
        exchange = HTTPExchange(
            config, self._breaker, ledger, path, send, extra, self._usage, self._options, method, outer
        )
        # The request's context is built on first use: most requests never make a model or tool call.
        token = current_context.set(exchange)
        try:
            try:
                await self.app(scope, receive, exchange.send)
            finally:
                exchange.live = False
                current_context.reset(token)
                ctx = exchange.ctx
                if ctx is None and self._audit:  # audited: a request that made no call has a record too
                    ctx = exchange.resolve()
                if ctx is not None:
                    ctx.disarm()
        except Exception as exc:
            halt = find_halt(exc)
            if halt is None:
                await exchange.finish_failed()
                raise
            # The halt is the request's answer, not a server error: it ends here.
            await exchange.finish_halted(halt)
        else:
            if not exchange.finished:  # fast path: a complete response needs no decision
                await exchange.finish()

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        config = self._resolver.resolve(scope, path)
        if config is None:
            await self.app(scope, receive, send)
            return
        extra: Sequence[tuple[bytes, bytes]] = ()
        ledger = None
        if self._pool is not None:
            adm = await self._admit(scope, path)
            if not adm.allowed:
                await refuse(scope, send, refusal_response(adm, config, self._audit), adm.reason)
                return
            extra, ledger = _encode(adm.headers), adm.ledger
        # Built and armed now: every data message is a step anyway, and the deadline must fire
        # while the app waits in receive(). Held in a (resolved) PendingContext like an HTTP
        # request's: that is what tells an inner copy of the middleware the session is ours.
        attributes = {"method": "WEBSOCKET", "path": path} if self._audit else None
        ctx = ExecutionContext(
            config,
            circuit_breaker=self._breaker,
            budget_parent=ledger,
            attributes=attributes,
            name=path,
            **(self._options or {}),
        ).arm()
        pending = PendingContext(lambda: ctx)
        pending.resolve()
        session = WebSocketSession(ctx, scope, receive, send, extra)
        token = current_context.set(pending)
        try:
            session.arm()
            try:
                await self.app(scope, session.receive, session.send)
            except Exception as exc:
                halt = find_halt(exc)
                if halt is None:
                    await session.finish()
                    raise
                await session.finish(halt)
            else:
                await session.finish()
        finally:
            current_context.reset(token)
            ctx.disarm()
            session.release()


def _encode(headers: Iterable[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers]
