"""The real OpenTelemetry SDK for the OTel tests: in-memory span exporter and metric reader.

``otel`` (a fixture) builds a fresh TracerProvider and MeterProvider per test and installs
veronica-mw's observer with them; the OTel middlewares under test get the same providers. Nothing
is set globally (the SDK allows that once per process), so tests stay independent.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from veronica_mw.observe import otel as veronica_otel
from veronica_mw.web.types import ASGIApp

HANG_GUARD_S = 10.0


class Telemetry:
    """One test's providers, and what they recorded."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self._points: dict[str, list[Any]] | None = None

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if name is None or s.name == name]

    def span(self, name: str) -> ReadableSpan:
        (span,) = self.spans(name)
        return span

    def server_spans(self, count: int = 1) -> list[ReadableSpan]:
        """The SERVER spans, once ``count`` have ended: a server ends its span after the response
        went out, so the client may see the response first."""
        deadline = time.monotonic() + HANG_GUARD_S
        while True:
            found = [s for s in self.spans() if s.kind is SpanKind.SERVER]
            if len(found) >= count or time.monotonic() > deadline:
                return found
            time.sleep(0.01)

    def collect(self) -> dict[str, list[Any]]:
        """Metric name -> data points (cumulative), read once per call."""
        points: dict[str, list[Any]] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                if scope.scope.name != "veronica_mw":
                    continue  # the OTel middlewares' own http.server.* metrics
                for metric in scope.metrics:
                    points.setdefault(metric.name, []).extend(metric.data.data_points)
                    points.setdefault(f"{metric.name}:unit", []).append(metric.unit)
        return points

    def halts(self) -> dict[str, int]:
        """The ``veronica.halts`` counter by reason."""
        points = self.collect().get("veronica.halts", [])
        return {dict(p.attributes)["veronica.reason"]: p.value for p in points}

    def asgi(self, app: ASGIApp) -> ASGIApp:
        """``app`` under opentelemetry-instrumentation-asgi's middleware, with these providers."""
        wrapped: ASGIApp = OpenTelemetryMiddleware(
            app, tracer_provider=self.tracer_provider, meter_provider=self.meter_provider
        )
        return wrapped

    @staticmethod
    def values(points: list[Any]) -> dict[frozenset[tuple[str, Any]], Any]:
        """Attributes -> value (counters) or (count, sum) (histograms)."""
        out: dict[frozenset[tuple[str, Any]], Any] = {}
        for point in points:
            key = frozenset(dict(point.attributes or {}).items())
            out[key] = point.value if isinstance(point, NumberDataPoint) else (point.count, point.sum)
        return out


def attrs(item: ReadableSpan | Event) -> dict[str, Any]:
    """A span's or event's attributes as a plain dict."""
    return dict(item.attributes or {})


def children_of(parent: ReadableSpan, spans: list[ReadableSpan]) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


@pytest.fixture
def otel(monkeypatch: pytest.MonkeyPatch) -> Iterator[Telemetry]:
    # tox's [testenv] (and tests/conftest.py) disable the SDK for every other test; the SDK reads
    # the switch when a provider is built.
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    telemetry = Telemetry()
    veronica_otel.enable(tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider)
    try:
        yield telemetry
    finally:
        veronica_otel.disable()
        veronica_otel.auto_enable()  # back to what `import veronica_mw` installed
        telemetry.tracer_provider.shutdown()
        telemetry.meter_provider.shutdown()
