"""The OpenTelemetry observer: a span per admitted model or tool call, halt events, metrics.

It only translates what the kernel already decided (see :mod:`veronica_mw.kernel.observer`):

- ``call_started``: a CLIENT span ``"chat gpt-4o"`` for a model call, an INTERNAL span
  ``"execute_tool search"`` for a tool call, child of the span current on the calling thread (the
  server's request span under the OTel ASGI/WSGI middlewares). A call the kernel runs itself
  (``call_llm``, ``wrap_tool_call``, ...) has its span made current while it runs, so what it calls
  nests under it; a ``begin_call`` node (callback-style adapters) may be settled on another thread
  or task, so its span is only kept in a side table, never attached there.
- ``call_ended``: usage, cost and outcome on the span, which ends; the metrics.
- ``halted`` / ``refused``: a ``veronica.halt`` event on the span current where the refusal
  happened (the request span for a 429, 503 or WebSocket 1008), or, for a halt on the timeout pool's
  thread, on the span that was current when the context started.
- WebSocket messages are steps of a session, not tool calls: no span each, but counts on the
  session's span when the context ends.

A refused call gets no span: it never ran. Nothing here may break a call: every failure (a broken
tracer provider, an exporter raising inside ``span.end()``) is logged once and then ignored.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from .. import __version__
from ..kernel.observer import Observer
from ._otel_content import ContentCapture
from ._otel_metrics import instruments_of, model_attributes
from ._otel_providers import ProviderCache

if TYPE_CHECKING:
    from ..kernel.execution import ExecutionContext
    from ..kernel.graph import CallNode

logger = logging.getLogger("veronica_mw")

_SCHEMA_URL = "https://opentelemetry.io/schemas/1.37.0"
_FAILED = frozenset({"error", "interrupted"})


class _Call:
    __slots__ = ("span", "token")

    def __init__(self, span: Span, token: object) -> None:
        self.span = span
        self.token = token  # set when the span was made current (inline calls only)


class _ContextState:
    """What the observer keeps per execution context (dropped with the context)."""

    __slots__ = ("chain_id", "span", "calls", "received", "sent")

    def __init__(self, chain_id: str, span: Span | None) -> None:
        self.chain_id = chain_id
        self.span = span  # current when the context started: the request's or session's span
        self.calls: dict[int, _Call] = {}  # open spans by node id
        self.received = 0
        self.sent = 0


# Module-level, not per observer: when enable() swaps the observer while calls are open, the new
# one still finds and ends their spans.
_states: WeakKeyDictionary[ExecutionContext, _ContextState] = WeakKeyDictionary()
_states_lock = threading.Lock()


def _state(ctx: ExecutionContext, span: Span | None = None) -> _ContextState:
    state = _states.get(ctx)
    if state is None:
        with _states_lock:
            state = _states.get(ctx)
            if state is None:
                state = _states[ctx] = _ContextState(ctx.chain_id, span)
    return state


def _recording(span: Span | None) -> Span | None:
    return span if span is not None and span.is_recording() else None


def _placeholder(provider: object) -> bool:
    # The API's own stand-in until an SDK is configured (an SDK or vendor provider never is one).
    return type(provider) is trace.ProxyTracerProvider


def _tracer_of(provider: Any) -> trace.Tracer | None:
    if isinstance(provider, trace.NoOpTracerProvider):
        return None
    tracer = provider.get_tracer("veronica_mw", __version__, schema_url=_SCHEMA_URL)
    return None if isinstance(tracer, trace.NoOpTracer) else tracer  # OTEL_SDK_DISABLED=true


def error_type(error: BaseException | None, status: str) -> str:
    if error is None:
        return status
    cls = type(error)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


class OTelObserver(Observer):
    """Spans, events and metrics of every contained call (see the module docstring).

    ``tracer_provider`` / ``meter_provider``: explicit providers; by default the global ones, used
    once an SDK configured them and skipped until then (see :mod:`._otel_providers`).
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: Any = None,
        content: ContentCapture | None = None,
    ) -> None:
        self._tracers = ProviderCache(tracer_provider, trace.get_tracer_provider, _placeholder, _tracer_of)
        self._metrics = instruments_of(meter_provider)
        self._content = content or ContentCapture.from_env()
        self._warned: set[str] = set()

    def _get_tracer(self) -> trace.Tracer | None:
        return self._tracers.get()

    def _failed(self, where: str, exc: Exception) -> None:
        # Logged once per hook: a misconfigured SDK would otherwise log on every call.
        if where not in self._warned:
            self._warned.add(where)
            logger.warning("veronica_mw: OpenTelemetry %s failed; ignored from now on", where, exc_info=exc)
        else:
            logger.debug("veronica_mw: OpenTelemetry %s failed: %r", where, exc)

    # -- the observer hooks (each guarded) -------------------------------------------------------

    def context_started(self, ctx: ExecutionContext) -> None:
        try:
            if self._get_tracer() is not None:
                span = _recording(trace.get_current_span())
                state = _state(ctx, span)
                if span is not None:  # the request's trace can be found by the 429's chain id
                    span.set_attribute("veronica.chain_id", state.chain_id)
        except Exception as exc:
            self._failed("context_started", exc)

    def call_started(self, ctx: ExecutionContext, node: CallNode) -> None:
        try:
            if not node.options.session_message:
                tracer = self._get_tracer()
                if tracer is not None:
                    self._start(tracer, ctx, node)
        except Exception as exc:
            self._failed("call_started", exc)

    def call_ended(self, ctx: ExecutionContext, node: CallNode, error: BaseException | None) -> None:
        try:
            state = _states.get(ctx)
            if node.options.session_message:
                if state is not None and node.status == "ok":
                    if node.name == "websocket.send":
                        state.sent += 1
                    else:
                        state.received += 1
                return
            call = state.calls.pop(node.node_id, None) if state is not None else None
            try:
                self._record(node, error)
            finally:
                if call is not None:
                    self._end(call, node, error)
        except Exception as exc:
            self._failed("call_ended", exc)

    def halted(self, ctx: ExecutionContext, reason: str, detail: str) -> None:
        try:
            snapshot = ctx.get_snapshot()
            state = _states.get(ctx)
            span = _recording(trace.get_current_span())
            if span is None and state is not None:
                # Halted off the request's thread (the timeout pool): the context's own span, else
                # the call that was running.
                span = _recording(state.span) or next(
                    (c.span for c in reversed(state.calls.values()) if c.span.is_recording()), None
                )
            if span is not None:
                span.add_event(
                    "veronica.halt",
                    {
                        "veronica.reason": reason,
                        "veronica.detail": detail,
                        "veronica.steps_used": snapshot.step_count,
                        "veronica.cost_usd_used": snapshot.cost_usd_accumulated,
                        "veronica.chain_id": snapshot.chain_id,
                    },
                )
        except Exception as exc:
            self._failed("halted", exc)
        self._count_halt(reason)

    def refused(self, reason: str, detail: str, status: int) -> None:
        try:
            span = _recording(trace.get_current_span())
            if span is not None:
                attributes = {"veronica.reason": reason, "veronica.detail": detail}
                span.add_event(
                    "veronica.halt", {**attributes, "veronica.steps_used": 0, "veronica.cost_usd_used": 0.0}
                )
        except Exception as exc:
            self._failed("refused", exc)
        self._count_halt(reason)

    def _count_halt(self, reason: str) -> None:
        try:
            instruments = self._metrics.get()
            if instruments is not None:
                instruments.halts.add(1, {"veronica.reason": reason})
        except Exception as exc:
            self._failed("the halts counter", exc)

    def context_ended(self, ctx: ExecutionContext) -> None:
        # The totals go on the context's span if it is still open: a WebSocket session's server
        # span is; an HTTP server span usually ended with the response's last body chunk.
        try:
            state = _states.get(ctx)
            span = _recording(state.span) if state is not None else None
            if state is None or span is None:
                return
            snapshot = ctx.get_snapshot()
            attributes: dict[str, Any] = {
                "veronica.steps_used": snapshot.step_count,
                "veronica.cost_usd_used": snapshot.cost_usd_accumulated,
            }
            if state.received or state.sent:
                attributes["veronica.websocket.messages_received"] = state.received
                attributes["veronica.websocket.messages_sent"] = state.sent
            if snapshot.abort_reason:
                attributes["veronica.reason"] = snapshot.abort_reason
            span.set_attributes(attributes)
        except Exception as exc:
            self._failed("context_ended", exc)

    # -- spans -----------------------------------------------------------------------------------

    def _start(self, tracer: trace.Tracer, ctx: ExecutionContext, node: CallNode) -> None:
        state = _state(ctx)
        options = node.options
        parent: otel_context.Context | None = None  # None: the current span is the parent
        if node.parent_id is not None:
            outer = state.calls.get(node.parent_id)
            if outer is not None and outer.token is None:  # a kernel parent whose span is not current
                parent = trace.set_span_in_context(outer.span)
        attributes: dict[str, Any]
        if node.kind == "llm":
            operation = options.gen_ai_operation or "chat"
            model = node.model
            name = f"{operation} {model}" if model else operation
            kind = SpanKind.CLIENT
            attributes = model_attributes(operation, model, options.provider, None)
            if options.operation_name:
                attributes["veronica.operation_name"] = options.operation_name
        else:
            name = f"execute_tool {node.name}"
            kind = SpanKind.INTERNAL
            attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": node.name}
        attributes["veronica.chain_id"] = state.chain_id
        attributes["veronica.step"] = node.step
        span = tracer.start_span(name, context=parent, kind=kind, attributes=attributes)
        token = otel_context.attach(trace.set_span_in_context(span)) if node.inline else None
        state.calls[node.node_id] = _Call(span, token)

    def _end(self, call: _Call, node: CallNode, error: BaseException | None) -> None:
        span = call.span
        try:
            status = node.status
            attributes: dict[str, Any] = {
                "veronica.status": status,
                "veronica.cost_usd": node.cost_usd,
                "gen_ai.usage.cost.amount": node.cost_usd,
                "gen_ai.usage.cost.currency": "USD",
            }
            if node.kind == "llm":
                if node.tokens_in or node.tokens_out:
                    attributes["gen_ai.usage.input_tokens"] = node.tokens_in
                    attributes["gen_ai.usage.output_tokens"] = node.tokens_out
                if node.response_model:
                    attributes["gen_ai.response.model"] = node.response_model
            if status in _FAILED:
                attributes["error.type"] = error_type(error, status)
                span.set_status(Status(StatusCode.ERROR, str(error) if error is not None else status))
            span.set_attributes(attributes)
            if self._content.enabled:
                self._content.record(span, node)
        finally:
            if call.token is not None:
                otel_context.detach(call.token)  # type: ignore[arg-type]
            span.end()

    # -- metrics ---------------------------------------------------------------------------------

    def _record(self, node: CallNode, error: BaseException | None) -> None:
        instruments = self._metrics.get()
        if instruments is None:
            return
        status = node.status
        if node.kind == "llm":
            options = node.options
            operation = options.gen_ai_operation or "chat"
            attributes = model_attributes(operation, node.model, options.provider, node.response_model)
        else:
            operation = "execute_tool"
            attributes = {"gen_ai.operation.name": operation}
        instruments.calls.add(1, {"gen_ai.operation.name": operation, "veronica.status": status})
        if node.cost_usd > 0.0:
            instruments.cost.add(node.cost_usd, attributes)
        if node.kind != "llm" or status == "released":
            return
        if node.tokens_in or node.tokens_out:
            instruments.tokens.record(node.tokens_in, {**attributes, "gen_ai.token.type": "input"})
            instruments.tokens.record(node.tokens_out, {**attributes, "gen_ai.token.type": "output"})
        if status in _FAILED:
            attributes["error.type"] = error_type(error, status)
        instruments.duration.record(max(node.ended - node.started, 0.0), attributes)
