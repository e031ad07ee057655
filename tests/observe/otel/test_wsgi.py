"""Flask under OpenTelemetryMiddleware (opentelemetry-instrumentation-wsgi) around
VeronicaWSGIMiddleware, on a real threaded werkzeug server."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from flask import Flask, jsonify, request
from opentelemetry.instrumentation.wsgi import OpenTelemetryMiddleware
from opentelemetry.trace import SpanKind

from veronica_mw import ExecutionConfig, WrapOptions, get_current_execution_context
from veronica_mw.web.wsgi import VeronicaWSGIMiddleware

from ...web.wsgi_support import get, serve
from .otel_support import Telemetry, attrs, otel

__all__ = ["otel"]

GPT = WrapOptions(operation_name="fake-llm", model="gpt-4o-mini")


def fake_llm(prompt: str) -> dict[str, Any]:
    return {
        "text": f"echo {prompt}",
        "model": "gpt-4o-mini",
        "usage": {"input_tokens": 50, "output_tokens": 5},
    }


def flask_app(otel: Telemetry) -> Flask:
    app = Flask(__name__)

    @app.get("/agent")
    def agent() -> Any:
        ctx = get_current_execution_context()
        assert ctx is not None
        loops = int(request.args.get("loops", 0))
        ctx.call_llm(fake_llm, "plan", options=GPT)
        for _ in range(1 + loops):
            ctx.call_tool(len, "query", options=WrapOptions(operation_name="search"))
        ctx.call_llm(fake_llm, "answer", options=GPT)
        return jsonify(steps=ctx.get_snapshot().step_count)

    config = ExecutionConfig(max_cost_usd=1.0, max_steps=4, max_retries_total=0)
    app.wsgi_app = VeronicaWSGIMiddleware(app.wsgi_app, config=config)  # type: ignore[method-assign]
    app.wsgi_app = OpenTelemetryMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider
    )
    return app


def test_flask_calls_are_children_of_the_wsgi_server_span(otel: Telemetry) -> None:
    with serve(flask_app(otel)) as server:
        reply = get(server, "/agent")
    assert reply.status == 200 and reply.json() == {"steps": 3}
    (server_span,) = otel.server_spans()
    assert server_span.kind is SpanKind.SERVER
    calls = [s for s in otel.spans() if s.name in ("chat gpt-4o-mini", "execute_tool search")]
    assert [s.name for s in calls] == ["chat gpt-4o-mini", "execute_tool search", "chat gpt-4o-mini"]
    assert all(s.parent is not None and s.parent.span_id == server_span.context.span_id for s in calls)
    assert [attrs(s)["gen_ai.usage.input_tokens"] for s in calls if s.kind is SpanKind.CLIENT] == [50, 50]
    # The WSGI server span lasts until the body is closed: the context's totals reach it.
    assert attrs(server_span)["veronica.chain_id"] == attrs(calls[0])["veronica.chain_id"]
    assert attrs(server_span)["veronica.steps_used"] == 3


def test_a_flask_request_past_its_step_limit_is_a_429_with_a_halt_event(otel: Telemetry) -> None:
    with serve(flask_app(otel)) as server:
        reply = get(server, "/agent?loops=5")
    assert reply.status == 429 and reply.json()["reason"] == "step_limit"
    (server_span,) = otel.server_spans()
    (event,) = server_span.events
    assert event.name == "veronica.halt"
    assert attrs(event)["veronica.reason"] == "step_limit" and attrs(event)["veronica.steps_used"] == 4
    assert attrs(server_span)["veronica.reason"] == "step_limit"
    assert len(otel.spans("execute_tool search")) == 3
    assert otel.halts() == {"step_limit": 1}


def test_spans_of_concurrent_requests_stay_in_their_own_trace(otel: Telemetry) -> None:
    with serve(flask_app(otel)) as server, ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda _: get(server, "/agent"), range(16)))
    assert [r.status for r in replies] == [200] * 16
    requests = otel.server_spans(16)
    assert len(requests) == 16
    by_trace = {s.context.trace_id: s for s in requests}
    for span in otel.spans():
        if span.name.startswith(("chat ", "execute_tool ")):
            server_span = by_trace[span.context.trace_id]
            assert span.parent is not None and span.parent.span_id == server_span.context.span_id
            assert attrs(span)["veronica.chain_id"] == attrs(server_span)["veronica.chain_id"]
