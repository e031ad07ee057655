"""What OpenTelemetry costs per contained call. Prints JSON; ``python benchmarks/bench_otel.py [--quick]``.

``ctx.wrap_llm_call`` of a trivial function, in microseconds per call (median of repeats):

- ``off``: no OpenTelemetry observer (``VERONICA_MW_OTEL=0``, or opentelemetry-api not installed);
- ``api_only``: opentelemetry-api installed, no SDK configured (the observer sees the API's
  placeholder provider and does nothing);
- ``sdk_noop_exporter``: the SDK's TracerProvider with a BatchSpanProcessor feeding an exporter
  that drops everything (one span per call is built, ended and queued);
- ``sdk_noop_exporter_and_metrics``: the same plus an SDK MeterProvider (calls, cost, tokens and
  duration recorded per call).

``sdk_alone_us`` is what the SDK itself charges for one such span and one counter measurement, so
the SDK figures can be read as "SDK work + veronica-mw's translation".

Needs ``opentelemetry-sdk``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence

os.environ.pop("OTEL_SDK_DISABLED", None)  # the SDK modes must really record

from opentelemetry import context as otel_context  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402

from veronica_mw import ExecutionConfig, ExecutionContext, WrapOptions  # noqa: E402
from veronica_mw.observe import otel  # noqa: E402

OPTIONS = WrapOptions(operation_name="bench", model="gpt-4o", provider="openai")


class DropExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def per_call_us(n: int, repeats: int) -> float:
    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=1e12, max_steps=10**12, max_retries_total=0))

    def stub() -> None:
        return None

    wrap = ctx.wrap_llm_call
    for _ in range(min(n, 1000)):  # warm up (first-use imports, tracer lookup)
        wrap(stub, OPTIONS)
    samples = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        for _ in range(n):
            wrap(stub, OPTIONS)
        samples.append((time.perf_counter() - start) / n * 1e6)
    return round(statistics.median(samples), 3)


def sdk_alone_us(tracer_provider: TracerProvider, meter_provider: MeterProvider, n: int) -> dict[str, float]:
    """The SDK's own price, for scale: one span with as many attributes as a model call's, made
    current and ended; one counter add with a model call's attributes."""
    tracer = tracer_provider.get_tracer("bench")
    start_attributes = {f"start.{i}": "value" for i in range(6)}
    end_attributes = {f"end.{i}": 1.0 for i in range(6)}
    begin = time.perf_counter()
    for _ in range(n):
        span = tracer.start_span("chat gpt-4o", attributes=start_attributes)
        token = otel_context.attach(trace.set_span_in_context(span))
        span.set_attributes(end_attributes)
        otel_context.detach(token)
        span.end()
    span_us = (time.perf_counter() - begin) / n * 1e6
    counter = meter_provider.get_meter("bench").create_counter("bench.calls")
    attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o", "veronica.status": "ok"}
    begin = time.perf_counter()
    for _ in range(n):
        counter.add(1, attributes)
    return {"span": round(span_us, 3), "measurement": round((time.perf_counter() - begin) / n * 1e6, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    args = parser.parse_args()
    n, repeats = (2_000, 3) if args.quick else (50_000, 7)
    figures: dict[str, float] = {}

    otel.disable()
    figures["off"] = per_call_us(n, repeats)

    otel.enable()  # the global providers: nobody configured an SDK
    figures["api_only"] = per_call_us(n, repeats)

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(DropExporter(), max_queue_size=100_000))
    otel.enable(tracer_provider=tracer_provider)
    figures["sdk_noop_exporter"] = per_call_us(n, repeats)

    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    otel.enable(tracer_provider=tracer_provider, meter_provider=meter_provider)
    figures["sdk_noop_exporter_and_metrics"] = per_call_us(n, repeats)
    otel.disable()
    sdk_alone = sdk_alone_us(tracer_provider, meter_provider, n)
    tracer_provider.shutdown()
    meter_provider.shutdown()

    print(
        json.dumps(
            {
                "benchmark": "otel",
                "python": platform.python_version(),
                "platform": sys.platform,
                "calls_per_repeat": n,
                "wrap_llm_call_us": figures,
                "overhead_us": {k: round(v - figures["off"], 3) for k, v in figures.items() if k != "off"},
                # A model call is one span and 2-5 measurements (calls, duration; cost, tokens x2).
                "sdk_alone_us": sdk_alone,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
