"""WSGI middleware: one :class:`~veronica_mw.ExecutionContext` per request, alive until the body is done.

``app.wsgi_app = VeronicaWSGIMiddleware(app.wsgi_app, config=...)`` (Flask) or
``application = VeronicaWSGIMiddleware(get_wsgi_application(), config=...)`` (Django ``wsgi.py``).

The app's ``start_response`` is deferred until its first body chunk (or the end of an empty body), so
a halt that happens before then -- including an ``ExecutionHalted`` that the framework turned into a
500 -- can still become the shared 429 problem response without ``start_response`` being called
twice. After the headers went out, a halt ends the body cleanly and is logged. A body the app has
already built (a ``list`` or ``tuple``: none of the app's code runs while it is sent) is decided as
soon as the app returns, and the request's context ends then.

``environ["veronica.context"]`` is the request's context from the start; its deadline timer is
scheduled (counting from the request start) only once something uses it, so a request that makes
no model or tool call never touches the shared timeout pool (see ``_wsgi_scope.RequestContext``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..instrumentation import instrument as instrument_sdks
from ..kernel.circuit_breaker import CircuitBreaker
from ..kernel.config import ExecutionConfig
from ..kernel.context import PendingContext, current_context
from ..kernel.exceptions import ExecutionHalted
from ..kernel.observer import Observer
from ..kernel.parent import BudgetParent
from ..kernel.policy import RuntimePolicy
from ._nested_halt import nested_halt
from ._wsgi_scope import (
    END,
    Headers,
    RequestContext,
    RequestScope,
    halt_refusal,
    next_in_context,
    request_context,
    status_code,
    status_line,
    wsgi_headers,
)
from .problem import (
    ConfigFactory,
    ConfigResolver,
    SyncBudgetPool,
    WarnCallback,
    context_options,
    find_halt,
    pool_failure,
    refusal_response,
    usage_headers,
)

if TYPE_CHECKING:
    from _typeshed import OptExcInfo
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

logger = logging.getLogger("veronica_mw")

_current = current_context.get

ENVIRON_KEY = "veronica.context"
"""The environ key under which the request's :class:`~veronica_mw.ExecutionContext` is published."""


def _halted(ctx: RequestContext) -> bool:
    """``ctx.aborted`` without the property call (once per body chunk)."""
    return ctx._ledger.reason is not None or (ctx._armed != 0 and bool(ctx._deadline) and ctx._expired())


class _Response(RequestScope):
    """One request: its context's lifetime (a :class:`RequestScope`), the ``start_response`` the app
    sees, and the body iterable handed to the server -- one object, as this is the per-request path."""

    __slots__ = (
        "_start", "_extra", "_usage", "_result", "_it", "status", "headers", "_sent", "_halted_at_send",
        "_write", "_done",
    )  # fmt: skip

    def __init__(
        self,
        config: ExecutionConfig,
        breaker: CircuitBreaker | None,
        ledger: BudgetParent | None,
        path: str,
        start_response: StartResponse,
        extra: Sequence[tuple[str, str]],
        usage: bool,
        options: dict[str, Any] | None = None,
        method: str | None = None,
    ) -> None:
        # RequestScope.__init__, written out (one frame less per request).
        if breaker is None and ledger is None and options is None:
            ctx = RequestContext(config)
            ctx._arm_from = ctx._started
            ctx._over = False
            ctx._name = path
            self.ctx = ctx
        else:
            self.ctx = request_context(config, breaker, ledger, path, options, method)
        self.path = path
        self._start = start_response
        self._extra = extra
        self._usage = usage
        self._result: Iterable[bytes] = ()
        self._it: Iterator[bytes] | None = None
        self.status: str | None = None
        self.headers: Headers = []
        self._sent = False
        self._halted_at_send = False
        self._write: Callable[[bytes], object] | None = None
        self._done = False

    # -- what the app sees -----------------------------------------------------------------------

    def start_response(
        self, status: str, headers: Headers, exc_info: OptExcInfo | None = None
    ) -> Callable[[bytes], object]:
        if exc_info is not None and exc_info[1] is not None:
            try:
                if self._sent:  # PEP 3333: too late to change the response; re-raise the app's error
                    raise exc_info[1].with_traceback(exc_info[2])
            finally:
                exc_info = None  # break the frame <-> traceback cycle
        elif self.status is not None:
            raise AssertionError("start_response() called a second time without exc_info")
        self.status, self.headers = status, headers
        return self.write

    def write(self, data: bytes) -> None:
        """The legacy imperative ``write()``: commits the headers, then writes through."""
        if not self._sent:
            self._send_headers()
        self._write(data)  # type: ignore[misc]

    def call_app(self, app: WSGIApplication, environ: WSGIEnvironment) -> Iterable[bytes]:
        """Call the app with the context current; return the body iterable (self) or the 429."""
        ctx = self.ctx
        token = current_context.set(self)
        try:
            self._result = app(environ, self.start_response)
        except Exception as exc:
            halt = find_halt(exc)
            if (halt is None and not ctx.aborted) or self._sent:
                self.end()
                raise
            return [self._refuse(halt, exc)]
        except BaseException:
            self.end()
            raise
        finally:
            current_context.reset(token)
        return self

    # -- what the server sees --------------------------------------------------------------------

    def __iter__(self) -> _Response:
        return self

    def __next__(self) -> bytes:
        if self._done:
            raise StopIteration
        ctx = self.ctx
        if self._sent:
            if self._it is None:  # the headers went out through write() before the first chunk
                return self._next_body_chunk()
            # Hot path: a body chunk once the headers are out (next_in_context, written out).
            if _halted(ctx) and not self._halted_at_send:
                self.halted_after_start()
                chunk: Any = END
            else:
                token = current_context.set(self)
                try:
                    chunk = next(self._it, END)
                except BaseException as exc:
                    current_context.reset(token)
                    if isinstance(exc, Exception) and (find_halt(exc) is not None or _halted(ctx)):
                        self.halted_after_start(exc)
                        chunk = END
                    else:
                        self.close()
                        raise
                else:
                    current_context.reset(token)
            if chunk is END:
                self.close()
                raise StopIteration
            return chunk  # type: ignore[no-any-return]
        token = current_context.set(self)
        try:
            it = self._it
            if it is None:
                it = self._it = iter(self._result)
            chunk = next(it, END)
        except Exception as exc:
            halt = find_halt(exc)
            if halt is None and not ctx.aborted:
                self.close()
                raise
            return self._refuse(halt, exc)
        finally:
            current_context.reset(token)
        halted = _halted(ctx)
        if (halted or (ctx._children and nested_halt(ctx) is not None)) and status_code(self.status) >= 500:
            # The app (or its framework) answered an error because of the halt (of the request's
            # context or one nested in it): send the request's refusal.
            return self._refuse(self._nested_halt(), None)
        if self.status is not None:
            if self._extra or self._usage:
                self._send_headers()
            else:  # _send_headers, written out for the common case
                self._halted_at_send = halted  # an app that chose its response after a halt keeps it
                self._sent = True
                self._write = self._start(self.status, self.headers)
        if chunk is END:
            self.close()
            raise StopIteration
        return chunk  # type: ignore[no-any-return]

    def finished(self, body: list[bytes] | tuple[bytes, ...]) -> Iterable[bytes]:
        """A body the app has already built (a list): none of its code runs while it is sent, so
        the response is decided now -- the 429 if the context halted and the app answered an
        error, else the app's own -- and the context ends here, not after the server's loop."""
        ctx = self.ctx
        halted = _halted(ctx)
        if (halted or (ctx._children and nested_halt(ctx) is not None)) and status_code(self.status) >= 500:
            return [self._refuse(self._nested_halt(), None)]
        if not self._sent:
            if self._extra or self._usage:
                self._send_headers()
            else:
                self._halted_at_send = halted
                self._sent = True
                self._write = self._start(self.status, self.headers)  # type: ignore[arg-type]
        self.close()
        return body

    def _next_body_chunk(self) -> bytes:
        try:
            if self._it is None:  # the headers went out through write() before the first chunk
                self._it = self.run(iter, self._result)
            chunk = next_in_context(self, self._it, self._halted_at_send)
        except BaseException:
            self.close()
            raise
        if chunk is END:
            self.close()
            raise StopIteration
        return chunk  # type: ignore[no-any-return]

    def close(self) -> None:
        """Close the app's iterable (context current) and end the request's context, exactly once."""
        if self._done:
            return
        self._done = True
        try:
            close = getattr(self._result, "close", None)
            if close is not None:
                self.run(close)
        finally:
            ctx = self.ctx
            if ctx._armed or ctx._arm_from is None or ctx._observers:  # audited: always recorded
                ctx.end()
            else:  # never used: nothing scheduled, nobody told it started (RequestContext.end)
                ctx._over = True
                ctx._arm_from = None

    # -- internals -------------------------------------------------------------------------------

    def _send_headers(self) -> None:
        headers = self.headers
        if self._extra or self._usage:
            headers = [*headers, *self._extra]  # a copy: the app's list is not ours to grow
            if self._usage:
                headers.extend(wsgi_headers(usage_headers(self.ctx.get_snapshot())))
        # An app that caught the halt and chose its own response keeps its whole body.
        self._halted_at_send = self.ctx.aborted
        self._sent = True
        self._write = self._start(self.status, headers)  # type: ignore[arg-type]

    def _nested_halt(self) -> ExecutionHalted | None:
        """The halt of a context nested in the request's, unless the request's own halted."""
        if _halted(self.ctx):
            return None
        inner = nested_halt(self.ctx)
        return inner.halted_error() if inner is not None else None

    def _refuse(self, halt: ExecutionHalted | None, exc: BaseException | None) -> bytes:
        if exc is not None and halt is None:
            logger.warning("veronica_mw: app failed after its context halted; answering 429", exc_info=exc)
        status, headers, body = halt_refusal(self.ctx, halt, self.path, self._extra, self._usage)
        try:
            self.close()
        except Exception:  # the 429 is still the right answer; the app's close failure is its own
            logger.exception("veronica_mw: closing the app's response failed")
        self._sent = True
        self._start(status_line(status), headers)
        return body


class VeronicaWSGIMiddleware:
    """Contain every request of a WSGI app in its own :class:`~veronica_mw.ExecutionContext`.

    ``config``: an :class:`~veronica_mw.ExecutionConfig`, or a callable of the environ returning one
    (or None to leave that request uncontained). A failing callable is logged and ``default_config``
    applies (fail closed: a zero-step config when none is given). ``exclude_paths``: exact paths, or
    prefixes ending in ``/``. ``budget_pool``: an object with ``admit(environ)`` (tenant budgets).
    ``usage_headers``: add ``x-veronica-*`` usage headers to every contained response.
    ``circuit_breaker``: one breaker shared by every request's context (an open circuit is a 429
    with ``Retry-After``). ``checks``: output checks for every model call (a ``"halt"`` check
    answers 502); ``policies``: runtime policies for every request's context (a rejected approval
    answers 403). ``audit``: a :class:`veronica_mw.AuditLog` (any kernel ``Observer``) every
    request's context reports to, with the request's method and path (never headers or query), and
    every budget-pool refusal.
    ``instrument``: patch every installed provider SDK once (``veronica_mw.instrument()``), so
    direct SDK calls made while a request is served are contained too; ``False`` leaves the SDKs
    alone. ``on_warn``: called with each ``soft_limit`` event of a request's context (its config's
    ``warn_at``); a callback that raises is logged and the request goes on. ``on_limit``: a
    :class:`veronica_mw.AskForMore`: a request at its cost or step limit asks a person for more
    and waits (its worker busy, its deadline running) for the decision.
    """

    def __init__(
        self,
        app: WSGIApplication,
        *,
        config: ExecutionConfig | ConfigFactory,
        default_config: ExecutionConfig | None = None,
        exclude_paths: Iterable[str] = (),
        budget_pool: SyncBudgetPool | None = None,
        usage_headers: bool = False,
        circuit_breaker: CircuitBreaker | None = None,
        checks: Iterable[Any] = (),
        policies: Iterable[RuntimePolicy] = (),
        audit: Observer | None = None,
        instrument: bool = True,
        on_warn: WarnCallback | None = None,
        on_limit: Any = None,
    ) -> None:
        if not callable(app):
            raise TypeError(f"app must be a WSGI callable, got {type(app).__name__}")
        if budget_pool is not None and not callable(getattr(budget_pool, "admit", None)):
            raise TypeError("budget_pool must have an admit(environ) method")
        self.app = app
        self._resolver = ConfigResolver(config, default_config=default_config, exclude_paths=exclude_paths)
        # The common case, one static config and no exclusions, skips resolution per request.
        self._static = config if isinstance(config, ExecutionConfig) and not self._resolver.excludes else None
        self._pool = budget_pool
        self._usage = bool(usage_headers)
        self._breaker = circuit_breaker
        self._options = context_options(checks, policies, audit, on_warn, on_limit)
        self._audit: tuple[Observer, ...] = (audit,) if audit is not None else ()
        if instrument:
            instrument_sdks()

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        # The applied-twice guard (see ``middleware_active``), inlined: it runs on every request.
        if isinstance(_current(), PendingContext) or not isinstance(environ, dict) or ENVIRON_KEY in environ:
            # An outer copy owns this request (or the environ is not one we can publish into):
            # pass through untouched rather than count the request twice or fail it.
            return self.app(environ, start_response)
        path = environ.get("PATH_INFO")
        if not isinstance(path, str):
            path = ""  # malformed environ: still contained, never excluded by accident
        config = self._static or self._resolver.resolve(environ, path)
        if config is None:
            return self.app(environ, start_response)
        extra: Sequence[tuple[str, str]] = ()
        ledger = None
        if self._pool is not None:
            try:
                adm: Any = self._pool.admit(environ)
            except Exception as exc:
                adm = pool_failure(exc, path)
            if not adm.allowed:
                status, headers, body = refusal_response(adm, config, self._audit)
                start_response(status_line(status), wsgi_headers(headers))
                return [body]
            extra = [(str(name), str(value)) for name, value in adm.headers]
            ledger = adm.ledger
        method = None
        if self._audit:  # audited requests carry their method (and path: never the query string)
            method = environ.get("REQUEST_METHOD")
            method = method if isinstance(method, str) else ""
        response = _Response(
            config, self._breaker, ledger, path, start_response, extra, self._usage, self._options, method
        )
        ctx = environ[ENVIRON_KEY] = response.ctx
        # response.call_app(self.app, environ), written out (one frame less per request)
        token = current_context.set(response)
        try:
            response._result = self.app(environ, response.start_response)
        except Exception as exc:
            halt = find_halt(exc)
            if (halt is None and not ctx.aborted) or response._sent:
                response.end()
                raise
            return [response._refuse(halt, exc)]
        except BaseException:
            response.end()
            raise
        finally:
            current_context.reset(token)
        result = response._result
        if (type(result) is list or type(result) is tuple) and response.status is not None:
            return response.finished(result)
        return response
