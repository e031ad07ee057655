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
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from .._version import __version__
from ..kernel.observer import Observer
from ._otel_content import ContentCapture
from ._otel_evaluations import record_evaluations
from ._otel_metrics import FAILED, error_type, instruments_of, model_attributes
from ._otel_providers import ProviderCache
from ._otel_state import Call, state_of, states

if TYPE_CHECKING:
    from ..kernel.execution import ExecutionContext
    from ..kernel.graph import CallNode
    from ..kernel.snapshot import ExecutionEvent

logger = logging.getLogger("veronica_mw")

_SCHEMA_URL = "https://opentelemetry.io/schemas/1.37.0"


def _recording(span: Span | None) -> Span | None:
    return span if span is not None and span.is_recording() else None


def _halted_above(ctx: ExecutionContext) -> bool:
    parent = ctx.parent
    while parent is not None:
        if parent.aborted:
            return True
        parent = parent.parent
    return False


def _placeholder(provider: object) -> bool:
    # The API's own stand-in until an SDK is configured (an SDK or vendor provider never is one).
    return type(provider) is trace.ProxyTracerProvider


def _fitted(span: Span, data: Any) -> None:
    """FitOutputToBudget lowered the call's output limit: what was sent, as span attributes too
    (a span event alone is dropped by backends that keep attributes only)."""
    fitted, original = data.get("fitted"), data.get("original")
    if isinstance(fitted, int):
        span.set_attribute("gen_ai.request.max_tokens", fitted)
        span.set_attribute("veronica.fit_output.max_tokens", fitted)
    if isinstance(original, int):
        span.set_attribute("veronica.fit_output.requested_max_tokens", original)
    field = data.get("field")
    if isinstance(field, str):
        span.set_attribute("veronica.fit_output.field", field)


def _tracer_of(provider: Any) -> trace.Tracer | None:
    if isinstance(provider, trace.NoOpTracerProvider):
        return None
    tracer = provider.get_tracer("veronica_mw", __version__, schema_url=_SCHEMA_URL)
    return None if isinstance(tracer, trace.NoOpTracer) else tracer  # OTEL_SDK_DISABLED=true


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
        # With contents opted in, ask the kernel and the adapters to keep each call's request and
        # response text on its node (they skip building them otherwise).
        self.record_bodies = self._content.enabled
        self._warned: set[str] = set()

    def refresh(self) -> None:
        """A global provider was set: the next call looks the global providers up again."""
        self._tracers.refresh()
        self._metrics.refresh()

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
                state = state_of(ctx, _recording(trace.get_current_span()))
                if state.span is not None:  # the request's trace can be found by the 429's chain id
                    state.span.set_attribute("veronica.chain_id", state.chain_id)
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
            state = states.get(ctx)
            if node.options.session_message:
                if state is not None and node.status == "ok":
                    if node.name == "websocket.send":  # the web layer's name for a message out
                        state.sent += 1
                    else:
                        state.received += 1
                return
            call = downgraded = None
            if state is not None:
                call = state.calls.pop(node.node_id, None)
                if state.downgraded:
                    downgraded = state.downgraded.pop(node.node_id, None)
            try:
                instruments = self._metrics.get()
                if instruments is not None:
                    instruments.record_call(node, downgraded or node.options.model, error)
            finally:
                if call is not None:
                    self._end(call, node, error)
        except Exception as exc:
            self._failed("call_ended", exc)

    def event(self, ctx: ExecutionContext, event: ExecutionEvent) -> None:
        # The context's events (an unpriced call, a divergence, a downgrade, ...) become span events:
        # on the call's span when the event names its node, else where they happened. A downgrade
        # also renames the call's span: the request went to the fallback model; a fitted call
        # (FitOutputToBudget's ``modified``) gets the output limit it was sent with.
        try:
            data = event.data
            node_id = data.get("node_id")
            call = None
            if isinstance(node_id, int):
                state = states.get(ctx)
                call = state.calls.get(node_id) if state is not None else None
                target = data.get("to_model")
                if event.kind == "downgraded" and isinstance(target, str):
                    state_of(ctx).downgraded[node_id] = target
                    if call is not None:
                        call.span.update_name(f"{call.operation} {target}")
                        call.span.set_attribute("gen_ai.request.model", target)
                        call.span.set_attribute("veronica.requested_model", str(data.get("from_model")))
                if event.kind == "modified" and call is not None:
                    _fitted(call.span, data)
            span = _recording(call.span if call is not None else trace.get_current_span())
            if span is not None:
                attributes: dict[str, Any] = {"veronica.detail": event.detail}
                for key, value in data.items():
                    if isinstance(value, (str, bool, int, float)):
                        attributes[f"veronica.{key}"] = value
                span.add_event(f"veronica.{event.kind}", attributes)
        except Exception as exc:
            self._failed("event", exc)

    def halted(self, ctx: ExecutionContext, reason: str, detail: str) -> None:
        if _halted_above(ctx):
            return  # the consequence of an enclosing context's halt, which was recorded already
        try:
            snapshot = ctx.get_snapshot()
            state = states.get(ctx)
            span = _recording(trace.get_current_span())
            if span is None and state is not None:
                # Halted off the request's thread (the timeout pool): the context's own span, else
                # the call that was running.
                open_calls = tuple(state.calls.values())  # a copy: other threads add and remove
                span = _recording(state.span) or next(
                    (c.span for c in reversed(open_calls) if c.span.is_recording()), None
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
            state = states.get(ctx)
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
        state = state_of(ctx)
        options = node.options
        parent: otel_context.Context | None = None  # None: the current span is the parent
        if node.parent_id is not None:
            outer = state.calls.get(node.parent_id)
            if outer is not None and outer.token is None:  # a kernel parent whose span is not current
                parent = trace.set_span_in_context(outer.span)
        attributes: dict[str, Any]
        if node.kind == "llm":
            operation = options.gen_ai_operation or "chat"
            model = node.model  # the requested model (a downgrade renames the span, see event())
            name = f"{operation} {model}" if model else operation
            kind = SpanKind.CLIENT
            attributes = model_attributes(operation, model, options.provider, None)
            if options.operation_name:
                attributes["veronica.operation_name"] = options.operation_name
        else:
            operation = "execute_tool"
            name = f"execute_tool {node.name}"
            kind = SpanKind.INTERNAL
            attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": node.name}
        attributes["veronica.chain_id"] = state.chain_id
        if state.parent_chain_id is not None:
            attributes["veronica.parent_chain_id"] = state.parent_chain_id
        attributes["veronica.step"] = node.step
        span = tracer.start_span(name, context=parent, kind=kind, attributes=attributes)
        token = otel_context.attach(trace.set_span_in_context(span)) if node.inline else None
        state.calls[node.node_id] = Call(span, token, operation)

    def _end(self, call: Call, node: CallNode, error: BaseException | None) -> None:
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
            if status in FAILED:
                attributes["error.type"] = error_type(error, status)
                span.set_status(Status(StatusCode.ERROR, str(error) if error is not None else status))
            span.set_attributes(attributes)
            if node.checks:
                record_evaluations(span, node)
            if self._content.enabled:
                self._content.record(span, node)
        finally:
            if call.token is not None:
                otel_context.detach(call.token)  # type: ignore[arg-type]
            span.end()
