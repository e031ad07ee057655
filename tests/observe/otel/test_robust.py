"""Telemetry never breaks a request: an exporter that raises, span processors that raise, a
tracer or meter provider that is misconfigured. The request gets its normal answer, the kernel
counts exactly as without OpenTelemetry, and the failure is logged once, not on every call."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from veronica_mw import (
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    WrapOptions,
    get_current_execution_context,
)
from veronica_mw.observe import otel as veronica_otel
from veronica_mw.web.asgi import VeronicaASGIMiddleware

from .otel_support import Telemetry, otel

__all__ = ["otel"]

LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=3, max_retries_total=0)
MODEL = WrapOptions(model="gpt-4o-mini")


def fake_llm() -> dict[str, Any]:
    return {"text": "ok", "model": "gpt-4o-mini", "usage": {"input_tokens": 10, "output_tokens": 2}}


class RaisingExporter(SpanExporter):
    def __init__(self) -> None:
        self.attempts = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.attempts += 1
        raise ConnectionError("collector unreachable")


class RaisingProcessor(SpanProcessor):
    """A span processor with a bug: the SDK does not catch what on_start/on_end raise."""

    def __init__(self, where: str) -> None:
        self.where = where

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self.where == "start":
            raise RuntimeError("processor bug on start")

    def on_end(self, span: ReadableSpan) -> None:
        if self.where == "end":
            raise RuntimeError("processor bug on end")


class BrokenProvider(TracerProvider):
    def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("misconfigured tracer provider")


def run_agent(calls: int = 2) -> tuple[int, Any]:
    """A contained run: ``calls`` model calls and one halt. Returns (steps used, current span after)."""
    ctx = ExecutionContext(LIMITS)
    with ctx:
        for _ in range(calls):
            ctx.call_llm(fake_llm, options=MODEL)
        with pytest.raises(ExecutionHalted):
            for _ in range(5):
                ctx.call_tool(len, "x")
    return ctx.get_snapshot().step_count, trace.get_current_span()


def asgi_app(provider: TracerProvider, otel: Telemetry) -> Any:
    app = FastAPI()
    ran = {"llm": 0}

    @app.get("/chat")
    def chat() -> dict[str, Any]:
        ctx = get_current_execution_context()
        assert ctx is not None
        ran["llm"] += 1
        return {"answer": ctx.call_llm(fake_llm, options=MODEL)["text"]}

    inner = VeronicaASGIMiddleware(app, config=LIMITS)
    return OpenTelemetryMiddleware(inner, tracer_provider=provider, meter_provider=otel.meter_provider), ran


@pytest.mark.anyio
async def test_an_exporter_that_raises_never_breaks_a_request(
    otel: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    exporter = RaisingExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    veronica_otel.enable(tracer_provider=provider, meter_provider=otel.meter_provider)
    app, ran = asgi_app(provider, otel)
    with caplog.at_level(logging.ERROR):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://test"
        ) as client:
            responses = [await client.get("/chat") for _ in range(3)]
    assert [(r.status_code, r.json()) for r in responses] == [(200, {"answer": "ok"})] * 3
    assert ran["llm"] == 3 and exporter.attempts >= 3  # our chat spans really went to the exporter
    assert not [r for r in caplog.records if "veronica_mw" in r.name]  # the SDK handled it


@pytest.mark.parametrize("where", ["start", "end"])
def test_a_span_processor_that_raises_never_breaks_a_call(
    otel: Telemetry, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    provider = TracerProvider()
    provider.add_span_processor(RaisingProcessor(where))
    veronica_otel.enable(tracer_provider=provider, meter_provider=otel.meter_provider)
    with caplog.at_level(logging.DEBUG, logger="veronica_mw"):
        steps, current = run_agent()
        steps_again, _ = run_agent()
    assert steps == steps_again == 3
    assert not current.get_span_context().is_valid  # nothing was left attached
    warnings = [
        r for r in caplog.records if r.levelno == logging.WARNING and "OpenTelemetry" in r.getMessage()
    ]
    assert len(warnings) == 1  # once, then quietly at DEBUG
    assert otel.collect()["veronica.calls"]  # metrics kept working


def test_a_misconfigured_tracer_provider_is_skipped_after_one_warning(
    otel: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    veronica_otel.enable(tracer_provider=BrokenProvider(), meter_provider=otel.meter_provider)
    with caplog.at_level(logging.WARNING, logger="veronica_mw"):
        assert run_agent()[0] == run_agent()[0] == 3
    assert len([r for r in caplog.records if "OpenTelemetry" in r.getMessage()]) == 1
    assert otel.halts() == {"step_limit": 2}


def test_a_meter_provider_that_raises_leaves_the_spans(
    otel: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    class BrokenMeters:
        def get_meter(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("misconfigured meter provider")

    veronica_otel.enable(tracer_provider=otel.tracer_provider, meter_provider=BrokenMeters())
    with caplog.at_level(logging.WARNING, logger="veronica_mw"):
        assert run_agent()[0] == 3
    assert len(otel.spans("chat gpt-4o-mini")) == 2 and len(otel.spans("execute_tool tool")) == 1
    assert [e.name for s in otel.spans() for e in s.events] == []  # no span was current at the halt


def test_enable_rejects_what_is_not_a_provider() -> None:
    with pytest.raises(TypeError, match="tracer_provider must be an OpenTelemetry TracerProvider"):
        veronica_otel.enable(tracer_provider="console")
    with pytest.raises(TypeError, match="meter_provider"):
        veronica_otel.enable(meter_provider=object())
