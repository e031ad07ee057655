"""Django integration, configured from ``settings.VERONICA``.

Two ways in (use one; if both are present the outer one owns the request and the other passes through):

* ``MIDDLEWARE = ["veronica_mw.adapters.django.VeronicaMiddleware", ...]`` -- first in the list, so it
  wraps every other middleware and the view;
* ``application = wrap_wsgi_application(get_wsgi_application())`` in ``wsgi.py`` -- the
  :class:`~veronica_mw.web.wsgi.VeronicaWSGIMiddleware` with the same settings.

``settings.VERONICA`` keys: ``max_cost_usd``, ``max_steps``, ``max_retries_total`` (required unless
``config`` is given), ``timeout_ms``, ``warn_at`` (soft-limit fractions); or ``config`` (a callable
of ``request.META``, or its dotted path); ``default_config`` (an ``ExecutionConfig`` or a dict of
limits), ``exclude_paths``, ``budget_pool``, ``circuit_breaker``, ``audit`` (a
:class:`veronica_mw.AuditLog`) and ``on_warn`` (a callable of the ``soft_limit`` event) -- objects
or dotted paths -- and ``usage_headers``; ``checks`` and ``policies`` (lists of objects or dotted
paths: output checks, runtime policies); ``instrument`` (default ``True``: provider SDK calls made
while a request is served are contained; see ``veronica_mw.instrument()``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..kernel.exceptions import MissingFrameworkError

try:
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.http import HttpRequest, HttpResponse
    from django.http.response import HttpResponseBase
    from django.utils.module_loading import import_string
except ImportError as _exc:  # pragma: no cover - exercised by the missing-framework test
    raise MissingFrameworkError("Django", "django", _exc, module="veronica_mw.adapters.django") from _exc

from ..instrumentation import instrument
from ..kernel.circuit_breaker import CircuitBreaker
from ..kernel.config import ExecutionConfig
from ..kernel.context import current_context
from ..kernel.execution import ExecutionContext
from ..kernel.observer import Observer
from ..web._wsgi_scope import END, Headers, RequestScope, halt_refusal, next_in_context, wsgi_headers
from ..web.problem import (
    ConfigResolver,
    context_options,
    find_halt,
    middleware_active,
    pool_failure,
    refusal_response,
    usage_headers,
)
from ..web.wsgi import ENVIRON_KEY, VeronicaWSGIMiddleware

__all__ = ["VeronicaMiddleware", "middleware_options", "wrap_wsgi_application"]

_LIMITS = ("max_cost_usd", "max_steps", "max_retries_total", "timeout_ms", "warn_at")
_OPTIONS = (
    "config", "default_config", "exclude_paths", "budget_pool", "usage_headers", "circuit_breaker", "checks",
    "policies", "audit", "instrument", "on_warn", "on_limit",
)  # fmt: skip


def _limits(value: Any, where: str) -> ExecutionConfig:
    if isinstance(value, ExecutionConfig):
        return value
    if not isinstance(value, Mapping):
        raise ImproperlyConfigured(f"{where} must be a dict of limits or an ExecutionConfig")
    try:
        return ExecutionConfig(**{key: value[key] for key in _LIMITS if key in value})
    except (TypeError, ValueError) as exc:
        raise ImproperlyConfigured(f"{where}: {exc}") from exc


def _loaded(value: Any) -> Any:
    return import_string(value) if isinstance(value, str) else value


def middleware_options() -> dict[str, Any]:
    """``settings.VERONICA`` turned into :class:`~veronica_mw.web.wsgi.VeronicaWSGIMiddleware` keywords.

    Raises ``ImproperlyConfigured`` at startup for a missing or invalid setting (a typo in a limit
    must not silently leave requests uncontained).
    """
    raw = getattr(settings, "VERONICA", None)
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured("settings.VERONICA must be a dict, e.g. {'max_cost_usd': 0.5, ...}")
    unknown = set(raw) - set(_LIMITS) - set(_OPTIONS)
    if unknown:
        raise ImproperlyConfigured(f"settings.VERONICA has unknown keys: {sorted(unknown)}")
    options: dict[str, Any] = {}
    if "config" in raw:
        if any(key in raw for key in _LIMITS):
            raise ImproperlyConfigured("settings.VERONICA: give either 'config' or the limits, not both")
        config = _loaded(raw["config"])
        if not isinstance(config, ExecutionConfig) and not callable(config):
            raise ImproperlyConfigured("settings.VERONICA['config'] must be a callable of request.META")
        options["config"] = config
    else:
        options["config"] = _limits(raw, "settings.VERONICA")
    if raw.get("default_config") is not None:
        options["default_config"] = _limits(raw["default_config"], "settings.VERONICA['default_config']")
    options["exclude_paths"] = raw.get("exclude_paths", ())
    try:  # validates exclude_paths now, as a settings error rather than a TypeError at first request
        ConfigResolver(options["config"], exclude_paths=options["exclude_paths"])
    except (TypeError, ValueError) as exc:
        raise ImproperlyConfigured(f"settings.VERONICA['exclude_paths']: {exc}") from exc
    options["budget_pool"] = _loaded(raw.get("budget_pool"))
    breaker = _loaded(raw.get("circuit_breaker"))
    if breaker is not None and not isinstance(breaker, CircuitBreaker):
        raise ImproperlyConfigured("settings.VERONICA['circuit_breaker'] must be a CircuitBreaker")
    options["circuit_breaker"] = breaker
    audit = _loaded(raw.get("audit"))
    if audit is not None and not isinstance(audit, Observer):
        raise ImproperlyConfigured("settings.VERONICA['audit'] must be a veronica_mw.AuditLog")
    options["audit"] = audit
    on_warn = _loaded(raw.get("on_warn"))
    if on_warn is not None and not callable(on_warn):
        raise ImproperlyConfigured("settings.VERONICA['on_warn'] must be a callable (event) -> None")
    options["on_warn"] = on_warn
    on_limit = _loaded(raw.get("on_limit"))
    if on_limit is not None and not callable(getattr(on_limit, "aask", None)):
        raise ImproperlyConfigured("settings.VERONICA['on_limit'] must be a veronica_mw.AskForMore")
    options["on_limit"] = on_limit
    options["usage_headers"] = bool(raw.get("usage_headers", False))
    for key in ("checks", "policies"):
        value = raw.get(key, ())
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise ImproperlyConfigured(f"settings.VERONICA[{key!r}] must be a list")
        # A check may be given as (check, on_fail), and the check itself by dotted path.
        options[key] = [(_loaded(i[0]), *i[1:]) if isinstance(i, tuple) and i else _loaded(i) for i in value]
    try:  # a bad check or policy is a settings error at startup, not a failure per request
        context_options(options["checks"], options["policies"])
    except (TypeError, ValueError) as exc:
        raise ImproperlyConfigured(f"settings.VERONICA checks/policies: {exc}") from exc
    options["instrument"] = bool(raw.get("instrument", True))
    return options


def wrap_wsgi_application(application: Any = None) -> VeronicaWSGIMiddleware:
    """Django's WSGI application (``get_wsgi_application()`` by default) contained per
    ``settings.VERONICA``: for ``wsgi.py``."""
    if application is None:
        from django.core.wsgi import get_wsgi_application

        application = get_wsgi_application()
    return VeronicaWSGIMiddleware(application, **middleware_options())


def _problem(status: int, headers: Headers, body: bytes) -> HttpResponse:
    response = HttpResponse(body, status=status)
    for name, value in headers:
        response.headers[name] = value
    return response


class _Stream:
    """``StreamingHttpResponse`` content pulled with the request's context current."""

    __slots__ = ("_scope", "_it", "_halted_before")

    def __init__(self, scope: RequestScope, content: Iterator[bytes], halted_before: bool) -> None:
        self._scope = scope
        self._it = content
        self._halted_before = halted_before

    def __iter__(self) -> _Stream:
        return self

    def __next__(self) -> bytes:
        chunk = next_in_context(self._scope, self._it, self._halted_before)
        if chunk is END:
            raise StopIteration
        return chunk  # type: ignore[no-any-return]


class VeronicaMiddleware:
    """Django middleware: one :class:`~veronica_mw.ExecutionContext` per request, from ``settings.VERONICA``.

    The context is ``request.META["veronica.context"]`` and the current context while the view
    runs and, for a ``StreamingHttpResponse``, while its content is iterated (it ends when the
    server closes the response). A halt becomes the shared 429 problem response: in
    ``process_exception`` when the view lets ``ExecutionHalted`` escape, or when the response is a
    5xx produced after the context halted.
    """

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response
        options = middleware_options()
        self._resolver = ConfigResolver(
            options["config"],
            default_config=options.get("default_config"),
            exclude_paths=options["exclude_paths"],
        )
        pool = options["budget_pool"]
        if pool is not None and not callable(getattr(pool, "admit", None)):
            raise ImproperlyConfigured("settings.VERONICA['budget_pool'] must have an admit(environ) method")
        self._pool = pool
        self._usage = options["usage_headers"]
        self._breaker = options["circuit_breaker"]
        self._options = context_options(
            options["checks"], options["policies"], options["audit"], options["on_warn"], options["on_limit"]
        )
        self._audit: tuple[Observer, ...] = (options["audit"],) if options["audit"] is not None else ()
        if options["instrument"]:
            instrument()

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        meta = request.META
        if middleware_active() or ENVIRON_KEY in meta:
            return self.get_response(request)  # the WSGI wrapper (or another copy) owns this request
        path = request.path_info
        config = self._resolver.resolve(meta, path)
        if config is None:
            return self.get_response(request)
        extra: Headers = []
        ledger = None
        if self._pool is not None:
            try:
                adm: Any = self._pool.admit(meta)
            except Exception as exc:
                adm = pool_failure(exc, path)
            if not adm.allowed:
                status, raw, body = refusal_response(adm, config, self._audit)
                return _problem(status, wsgi_headers(raw), body)
            extra = [(str(name), str(value)) for name, value in adm.headers]
            ledger = adm.ledger
        method = (request.method or "") if self._audit else None  # audited: method and path only
        scope = RequestScope(config, self._breaker, ledger, path, self._options, method)
        meta[ENVIRON_KEY] = scope.ctx
        token = current_context.set(scope)
        try:
            response = self.get_response(request)
        except BaseException:
            scope.end()
            raise
        finally:
            current_context.reset(token)
        return self._finish(scope, response, extra)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        """Answer an escaping ``ExecutionHalted`` with the 429 before Django turns it into a 500."""
        halt = find_halt(exception)
        ctx = request.META.get(ENVIRON_KEY)
        if halt is None or not isinstance(ctx, ExecutionContext):
            return None
        return _problem(*halt_refusal(ctx, halt, request.path_info))

    def _finish(self, scope: RequestScope, response: HttpResponseBase, extra: Headers) -> HttpResponseBase:
        ctx = scope.ctx
        if ctx.aborted and response.status_code >= 500:
            # Django's own handler turned the halt into an error page: send the 429 instead.
            if response.streaming:
                scope.run(response.close)  # release its content; a plain error page holds nothing
            response = _problem(*halt_refusal(ctx, None, scope.path))
        for name, value in extra:
            response.headers[name] = value
        if self._usage:
            for name, value in wsgi_headers(usage_headers(ctx.get_snapshot())):
                response.headers[name] = value
        if not response.streaming:
            scope.end()
            return response
        if getattr(response, "is_async", False):
            # Async content is iterated by Django's ASGI handler in its own task; only the
            # context's lifetime (until close) can be kept here.
            self._end_on_close(scope, response)
            return response
        # Streaming: keep the context for the body; the server's close() ends it (also on a
        # client disconnect), after closing the content with the context current.
        stream = _Stream(scope, iter(response.streaming_content), ctx.aborted)  # type: ignore[attr-defined]
        response.streaming_content = stream  # type: ignore[attr-defined]
        self._end_on_close(scope, response)
        return response

    @staticmethod
    def _end_on_close(scope: RequestScope, response: HttpResponseBase) -> None:
        close = response.close

        def close_in_context() -> None:
            try:
                scope.run(close)
            finally:
                scope.end()

        response.close = close_in_context  # type: ignore[method-assign]
