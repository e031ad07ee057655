"""How OpenTelemetry is switched on, each case in a fresh interpreter (global providers can be set
once per process): on by default once opentelemetry-api is importable, without importing it or
registering any observer until an SDK is configured; VERONICA_MW_OTEL=0 turns it off; the SDK
configured before or after `import veronica_mw` (the usual order), even after the first calls,
receives the spans; API only, OTEL_SDK_DISABLED=true and a broken global provider are no-ops that
never fail a call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

WORK = """
import json, logging, sys
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, WrapOptions
from veronica_mw.kernel.observer import global_observers

def work():
    with ExecutionContext(ExecutionConfig(max_cost_usd=1, max_steps=2, max_retries_total=0)) as ctx:
        ctx.call_llm(lambda: {"usage": {"input_tokens": 3, "output_tokens": 1}, "model": "gpt-4o"},
                     options=WrapOptions(model="gpt-4o"))
        ctx.call_tool(len, "x", options=WrapOptions(operation_name="count"))
        try:
            ctx.call_tool(len, "y")
        except ExecutionHalted as halt:
            return halt.reason

def otel_modules():
    return sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")

def observers():
    return [type(o).__name__ for o in global_observers()]
"""

SDK = """
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

def span_names():
    return [s.name for s in exporter.get_finished_spans()]

def metric_names():
    data = reader.get_metrics_data()
    return sorted(m.name for r in (data.resource_metrics if data else ()) for s in r.scope_metrics
                  for m in s.metrics)
"""


LOGGING = "import logging; logging.basicConfig(level=logging.WARNING)\n"


def spawn(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter, with the SDK switch and ours unset unless given."""
    environ = {k: v for k, v in os.environ.items() if k not in ("OTEL_SDK_DISABLED", "VERONICA_MW_OTEL")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**environ, **env}, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def run(code: str, **env: str) -> Any:
    return json.loads(spawn(code, **env).stdout.splitlines()[-1])


def test_on_by_default_and_nothing_is_imported_or_registered_until_an_sdk_is_configured() -> None:
    result = run(
        WORK
        + """
before = (otel_modules(), observers())
reason = work()
without_sdk = (observers(), "opentelemetry.trace" in sys.modules)
from opentelemetry import trace  # API only, as many libraries import it: still nothing to pay for
api_only = (work(), observers())
"""
        + SDK
        + """
configured = observers()
reason = work()
print(json.dumps([before, without_sdk, api_only, configured, reason, observers(), span_names()]))
"""
    )
    assert result == [
        [[], []],
        [[], False],
        ["step_limit", []],
        ["_StandIn"],
        "step_limit",
        ["OTelObserver"],
        ["chat gpt-4o", "execute_tool count"],
    ]


def test_veronica_mw_otel_0_turns_it_off() -> None:
    code = WORK + "reason = work(); print(json.dumps([reason, observers(), otel_modules()]))"
    assert run(code, VERONICA_MW_OTEL="0") == ["step_limit", [], []]
    assert run(code, VERONICA_MW_OTEL="off")[1] == []


def test_an_unknown_switch_value_is_reported_and_leaves_it_on() -> None:
    done = spawn(LOGGING + WORK + SDK + "print(json.dumps(observers()))", VERONICA_MW_OTEL="maybe")
    assert json.loads(done.stdout) == ["_StandIn"]
    assert "VERONICA_MW_OTEL='maybe' not understood" in done.stderr


def test_the_sdk_configured_after_import_receives_spans_and_metrics() -> None:
    result = run(WORK + SDK + "reason = work(); print(json.dumps([reason, span_names(), metric_names()]))")
    assert result == [
        "step_limit",
        ["chat gpt-4o", "execute_tool count"],
        [
            "gen_ai.client.operation.duration",
            "gen_ai.client.token.usage",
            "veronica.calls",
            "veronica.cost",
            "veronica.halts",
        ],
    ]


def test_the_sdk_configured_after_the_first_calls_receives_the_next_calls_at_once() -> None:
    # A startup hook that runs after the first requests: the very next context records.
    code = WORK + "first = work()\n" + SDK + "second = work()\n"
    code += "print(json.dumps([first, second, span_names(), metric_names()]))"
    first, second, spans, metric_names = run(code)
    assert [first, second] == ["step_limit", "step_limit"]
    assert spans == ["chat gpt-4o", "execute_tool count"]
    assert "veronica.calls" in metric_names and "gen_ai.client.token.usage" in metric_names


def test_the_sdk_configured_before_import_receives_spans() -> None:
    code = SDK + WORK + "reason = work(); print(json.dumps([reason, observers(), span_names()]))"
    assert run(code) == ["step_limit", ["OTelObserver"], ["chat gpt-4o", "execute_tool count"]]


def test_a_meter_provider_set_after_the_tracer_provider_records_the_next_call() -> None:
    code = (
        WORK
        + """
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

trace.set_tracer_provider(TracerProvider())
work()
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
work()
data = reader.get_metrics_data()
calls = [p.value for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics
         if m.name == "veronica.calls" for p in m.data.data_points]
print(json.dumps(sum(calls)))
"""
    )
    assert run(code) == 2  # the second work(): one model call, one tool call (the third refused)


def test_an_sdk_named_by_environment_variable_is_used_without_any_setter_call() -> None:
    code = WORK + "reason = work(); print(json.dumps([reason, observers()]))"
    result = run(code, OTEL_PYTHON_TRACER_PROVIDER="sdk_tracer_provider")
    assert result == ["step_limit", ["OTelObserver"]]


def test_api_only_is_a_no_op_that_attaches_nothing() -> None:
    code = (
        WORK
        + """
from opentelemetry import metrics, trace
from veronica_mw.observe import otel
reason = work()
print(json.dumps([reason, otel.active_observer(), observers(),
                  trace.get_current_span().get_span_context().is_valid]))
"""
    )
    assert run(code) == ["step_limit", None, [], False]


def test_otel_sdk_disabled_records_nothing() -> None:
    code = WORK + SDK + "reason = work(); print(json.dumps([reason, span_names(), metric_names()]))"
    assert run(code, OTEL_SDK_DISABLED="true") == ["step_limit", [], []]


def test_a_broken_global_provider_is_logged_once_and_calls_go_on() -> None:
    code = (
        LOGGING
        + WORK
        + """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

class Broken(TracerProvider):
    def get_tracer(self, *args, **kwargs):
        raise RuntimeError("misconfigured")

trace.set_tracer_provider(Broken())
print(json.dumps([work(), work()]))
"""
    )
    done = spawn(code)
    assert json.loads(done.stdout) == ["step_limit", "step_limit"]
    assert done.stderr.count("OpenTelemetry context_started failed") == 1
    assert "Traceback" in done.stderr  # the one warning says what went wrong


def test_under_fastapis_own_telemetry_its_span_is_the_parent() -> None:
    code = (
        WORK
        + SDK
        + """
import asyncio
import httpx
from fastapi import FastAPI
from veronica_mw import VeronicaASGIMiddleware, get_current_execution_context

app = FastAPI()  # no OTel middleware: FastAPI's native telemetry opens the server span

@app.get("/chat")
def chat():
    get_current_execution_context().call_llm(lambda: "ok", options=WrapOptions(model="gpt-4o"))
    return {}

limits = ExecutionConfig(max_cost_usd=1, max_steps=5, max_retries_total=0)
app.add_middleware(VeronicaASGIMiddleware, config=limits)

async def main():
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        assert (await client.get("/chat")).status_code == 200

asyncio.run(main())
spans = {s.context.span_id: s for s in exporter.get_finished_spans()}
chat = next(s for s in spans.values() if s.name == "chat gpt-4o")
parent = spans[chat.parent.span_id]
print(json.dumps([parent.instrumentation_scope.name, parent.context.trace_id == chat.context.trace_id]))
"""
    )
    assert run(code) == ["fastapi", True]
