"""What OpenTelemetry costs per contained call. Prints JSON; ``python benchmarks/bench_otel.py [--quick]``.

``no_sdk``: telemetry that goes nowhere, side by side, in rounds that alternate the two states —
``off`` (``VERONICA_MW_OTEL=0``: no observer) and ``default`` (what ``import veronica_mw`` sets up
with ``opentelemetry-api`` installed and imported, and no SDK configured): ``wrap_llm_call`` µs per
call, the ASGI and WSGI middleware's µs per request (called directly; the endpoint makes one
``call_llm``), and the memory one context retains after 200,000 calls (``--quick``: 20,000).
``ratio`` is default / off (target <= 1.10). ``observers_registered`` names what the default
state registered (nothing, until an SDK is configured).

``wrap_llm_call_us``: ``ctx.wrap_llm_call`` of a trivial function, in microseconds per call
(median of repeats):

- ``off``: no OpenTelemetry observer (``VERONICA_MW_OTEL=0``, or opentelemetry-api not installed);
- ``api_only``: the observer installed explicitly with ``enable()`` and no SDK configured (it sees
  the API's placeholder provider and does nothing; the default state registers no observer then);
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
import asyncio
import gc
import json
import os
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any

os.environ.pop("OTEL_SDK_DISABLED", None)  # the SDK modes must really record

from opentelemetry import context as otel_context  # noqa: E402
from opentelemetry import metrics, trace  # noqa: E402, F401  (imported, as users' libraries do)
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402

from veronica_mw import ExecutionConfig, ExecutionContext, WrapOptions  # noqa: E402
from veronica_mw import get_current_execution_context as current  # noqa: E402
from veronica_mw.kernel.observer import global_observers  # noqa: E402
from veronica_mw.observe import otel  # noqa: E402
from veronica_mw.web.asgi import VeronicaASGIMiddleware  # noqa: E402
from veronica_mw.web.wsgi import VeronicaWSGIMiddleware  # noqa: E402

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


REQUEST_LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=20, max_retries_total=3)
HTTP_START: Any = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text")]}
HTTP_BODY: Any = {"type": "http.response.body", "body": b"ok", "more_body": False}


async def asgi_endpoint(scope: Any, receive: Any, send: Any) -> None:
    current().call_llm(lambda: "ok", options=OPTIONS)  # type: ignore[union-attr]
    await send(HTTP_START)
    await send(HTTP_BODY)


def wsgi_endpoint(environ: Any, start_response: Any) -> list[bytes]:
    current().call_llm(lambda: "ok", options=OPTIONS)  # type: ignore[union-attr]
    start_response("200 OK", [("content-type", "text/plain")])
    return [b"ok"]


def asgi_request_us(n: int) -> float:
    app = VeronicaASGIMiddleware(asgi_endpoint, config=REQUEST_LIMITS)
    scope = {"type": "http", "path": "/", "method": "GET", "headers": [], "query_string": b""}

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        return None

    async def run() -> float:
        start = time.perf_counter()
        for _ in range(n):
            await app(scope, receive, send)
        return (time.perf_counter() - start) / n * 1e6

    return asyncio.run(run())


def wsgi_request_us(n: int) -> float:
    app = VeronicaWSGIMiddleware(wsgi_endpoint, config=REQUEST_LIMITS)
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "SERVER_NAME": "bench", "SERVER_PORT": "80"}

    def start_response(status: str, headers: Any, exc_info: Any = None) -> None:
        return None

    start = time.perf_counter()
    for _ in range(n):
        body = app(dict(environ), start_response)
        for _chunk in body:
            pass
        close = getattr(body, "close", None)
        if close is not None:
            close()
    return (time.perf_counter() - start) / n * 1e6


def context_retained_mib(calls: int) -> float:
    """What one context retains after ``calls`` wrapped calls (its graph ring, aggregates...)."""

    def stub() -> None:
        return None

    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=1e12, max_steps=10**12, max_retries_total=0))
    wrap = ctx.wrap_llm_call
    for _ in range(calls):
        wrap(stub, OPTIONS)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del ctx
    return round((after - before) / 2**20, 3)


def no_sdk(n: int, rounds: int, memory_calls: int) -> dict[str, Any]:
    """off vs default (no SDK configured), alternating in every round; best (memory: last) of each."""
    states: dict[str, Callable[[], None]] = {"off": otel.disable, "default": otel.auto_enable}
    rows: dict[str, Callable[[], float]] = {
        "wrap_llm_call_us": lambda: per_call_us(n, 1),
        "asgi_request_us": lambda: asgi_request_us(max(n // 10, 200)),
        "wsgi_request_us": lambda: wsgi_request_us(max(n // 10, 200)),
    }
    best: dict[str, dict[str, float]] = {row: {} for row in [*rows, "context_retained_mib"]}
    registered: list[str] = []
    for _ in range(rounds):
        for state, enter in states.items():
            otel.disable()
            enter()
            if state == "default":
                registered = [type(o).__name__ for o in global_observers()]
            for row, measure in rows.items():
                value = measure()
                best[row][state] = round(min(best[row].get(state, value), value), 3)
    for state, enter in states.items():
        otel.disable()
        enter()
        best["context_retained_mib"][state] = context_retained_mib(memory_calls)
    otel.disable()
    for figures in best.values():
        figures["ratio"] = round(figures["default"] / figures["off"], 3) if figures["off"] else 0.0
    return {"observers_registered": registered, **best}


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
    side_by_side = no_sdk(n // 5, 3 if args.quick else 7, 20_000 if args.quick else 200_000)
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
                "no_sdk": side_by_side,
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
