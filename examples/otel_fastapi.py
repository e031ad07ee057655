"""OpenTelemetry: veronica-mw's spans under the request's server span, printed by the console exporter.

Offline (a fake "LLM" reporting usage like a provider does). Needs::

    pip install "veronica-mw[otel,fastapi]" opentelemetry-sdk opentelemetry-instrumentation-asgi

Run it from the repository root::

    python examples/otel_fastapi.py        # two requests in-process: spans as they end, then the traces
    uvicorn examples.otel_fastapi:app      # or serve it: each request's spans print as they end

In production, swap ``ConsoleSpanExporter`` for ``OTLPSpanExporter`` (opentelemetry-exporter-otlp)
and a ``BatchSpanProcessor``; nothing else changes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from fastapi import FastAPI
from opentelemetry import metrics, trace
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from veronica_mw import ExecutionConfig, WrapOptions, get_current_execution_context
from veronica_mw.web.asgi import VeronicaASGIMiddleware

# -- 1. The application configures the SDK (veronica-mw only uses the OpenTelemetry API) ------------


def one_line(span: ReadableSpan) -> str:
    """The console exporter's output, one line per span instead of its multi-line JSON."""
    attrs = dict(span.attributes or {})
    keys = ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "veronica.cost_usd", "veronica.status")
    shown = " ".join(
        f"{k.split('.')[-1]}={attrs[k]:g}"
        if isinstance(attrs.get(k), float)
        else f"{k.split('.')[-1]}={attrs[k]}"
        for k in keys
        if k in attrs
    )
    return f"[console exporter] {span.name} ({span.kind.name.lower()}) {shown}\n"


resource = Resource.create({"service.name": "veronica-example"})
tracer_provider = TracerProvider(resource=resource)
tracer_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(formatter=one_line)))
collected = InMemorySpanExporter()  # only so the script can print the traces as trees at the end
tracer_provider.add_span_processor(SimpleSpanProcessor(collected))
trace.set_tracer_provider(tracer_provider)
metric_reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[metric_reader]))

# -- 2. The app: veronica-mw inside, OpenTelemetry's ASGI middleware outside ------------------------

MODEL = WrapOptions(operation_name="fake-llm", model="gpt-4o-mini", provider="openai")


def fake_llm(prompt: str) -> dict[str, Any]:
    """Stands in for a chat completion: text, the model that answered, token usage."""
    usage = {"input_tokens": 120, "output_tokens": 40}
    return {"text": f"echo: {prompt}", "model": "gpt-4o-mini", "usage": usage}


def search_tool(query: str) -> str:
    return f"3 documents about {query!r}"


app = FastAPI(title="veronica-mw + OpenTelemetry")


@app.get("/chat")
def chat(q: str = "hello", tools: int = 1) -> dict[str, Any]:
    ctx = get_current_execution_context()
    assert ctx is not None
    plan = ctx.call_llm(fake_llm, f"plan for {q}", options=MODEL)
    for i in range(tools):  # with tools above the step limit the halt escapes: the client gets a 429
        ctx.call_tool(search_tool, f"{q} #{i}", options=WrapOptions(operation_name="search"))
    answer = ctx.call_llm(fake_llm, f"answer {q}", options=MODEL)
    return {"plan": plan["text"], "answer": answer["text"]}


app.add_middleware(
    VeronicaASGIMiddleware, config=ExecutionConfig(max_cost_usd=0.05, max_steps=5, max_retries_total=1)
)
# Added last, so it is the outermost: its server span is current when veronica-mw's calls start.
app.add_middleware(OpenTelemetryMiddleware)


# -- 3. Two requests, then the traces as trees ---------------------------------------------------------


def print_trees(spans: list[ReadableSpan]) -> None:
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        parent = span.parent.span_id if span.parent is not None else None
        children.setdefault(parent, []).append(span)

    def show(span: ReadableSpan, depth: int) -> None:
        attrs = dict(span.attributes or {})
        keys = ("veronica.chain_id",) if depth == 0 else ("veronica.step", "veronica.status")
        notes = [f"{k}={attrs[k]}" for k in keys if k in attrs]
        if "http.status_code" in attrs:
            notes.append(f"http.status_code={attrs['http.status_code']}")
        print(f"{'  ' * depth}{span.name} [{span.kind.name}] {' '.join(notes)}")
        for event in span.events:
            e = dict(event.attributes or {})
            reason, steps = e["veronica.reason"], e["veronica.steps_used"]
            print(f"{'  ' * (depth + 1)}event {event.name}: reason={reason} steps_used={steps}")
        for child in children.get(span.context.span_id, []):
            if not child.name.endswith("http send"):  # the ASGI middleware's per-message spans
                show(child, depth + 1)

    for root in children.get(None, []):
        show(root, 0)


async def main() -> None:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://example") as client:
        ok = await client.get("/chat", params={"q": "otel"})
        runaway = await client.get("/chat", params={"q": "loop", "tools": 10})
    reason = runaway.json()["reason"]
    print(f"\nGET /chat -> {ok.status_code}; GET /chat?tools=10 -> {runaway.status_code} {reason}")
    print("\nTraces:")
    print_trees(list(collected.get_finished_spans()))
    print("\nMetrics:")
    data = metric_reader.get_metrics_data()
    for scope in (s for r in (data.resource_metrics if data else ()) for s in r.scope_metrics):
        if scope.scope.name == "veronica_mw":
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    shown = f"{value:g}" if value is not None else f"count={point.count} sum={point.sum:g}"  # type: ignore[union-attr]
                    print(f"  {metric.name} [{metric.unit}] {dict(point.attributes or {})} {shown}")


if __name__ == "__main__":
    asyncio.run(main())
