"""Spans, halt events and metrics of contained calls, against the real OTel SDK (no web layer)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest
from genai_prices import Usage, calc_price
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from veronica_mw import (
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    PolicyContext,
    PolicyDecision,
    PolicyPipeline,
    WrapOptions,
)
from veronica_mw.control import MaxLength

from .otel_support import Telemetry, attrs, children_of, otel

__all__ = ["otel"]  # the fixture, re-exported for pytest


GPT4O = WrapOptions(operation_name="planner", model="gpt-4o", provider="openai")
PRICE = float(calc_price(Usage(input_tokens=1000, output_tokens=500), model_ref="gpt-4o").total_price)
LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=3)


def completion(model: str = "gpt-4o-2024-08-06") -> dict[str, Any]:
    """What a provider reports: usage and the model that answered."""
    return {"text": "fine", "model": model, "usage": {"input_tokens": 1000, "output_tokens": 500}}


class ProviderDown(ConnectionError):
    pass


def down() -> None:
    raise ProviderDown("503 from the provider")


def test_model_and_tool_spans_with_their_attributes_nest_where_they_ran(otel: Telemetry) -> None:
    tracer = otel.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("request") as request:
        with ExecutionContext(LIMITS) as ctx:
            ctx.call_llm(completion, options=GPT4O)

            def search() -> str:  # a tool that asks the model: its call nests under the tool
                assert trace.get_current_span().name == "execute_tool search"  # type: ignore[attr-defined]
                ctx.call_llm(completion, options=GPT4O)
                return "3 documents"

            ctx.call_tool(search, options=WrapOptions(operation_name="search"))
        assert trace.get_current_span() is request  # every span made current was taken off again
    spans = otel.spans()
    first, nested = otel.spans("chat gpt-4o")
    tool = otel.span("execute_tool search")
    request_span = otel.span("request")
    assert {s.name for s in children_of(request_span, spans)} == {"chat gpt-4o", "execute_tool search"}
    assert children_of(tool, spans) == [nested]
    assert first.kind is SpanKind.CLIENT and tool.kind is SpanKind.INTERNAL
    assert attrs(first) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.response.model": "gpt-4o-2024-08-06",
        "gen_ai.usage.input_tokens": 1000,
        "gen_ai.usage.output_tokens": 500,
        "gen_ai.usage.cost.amount": pytest.approx(PRICE),
        "gen_ai.usage.cost.currency": "USD",
        "veronica.cost_usd": pytest.approx(PRICE),
        "veronica.chain_id": ctx.chain_id,
        "veronica.step": 1,
        "veronica.status": "ok",
        "veronica.operation_name": "planner",
    }
    assert attrs(tool) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "search",
        "gen_ai.usage.cost.amount": 0.0,
        "gen_ai.usage.cost.currency": "USD",
        "veronica.cost_usd": 0.0,
        "veronica.chain_id": ctx.chain_id,
        "veronica.step": 2,
        "veronica.status": "ok",
    }
    assert attrs(nested)["veronica.step"] == 3
    assert first.status.status_code is StatusCode.UNSET
    # The context's id, and its totals at the end, go on the span it started under.
    assert attrs(request_span) == {
        "veronica.chain_id": ctx.chain_id,
        "veronica.steps_used": 3,
        "veronica.cost_usd_used": pytest.approx(2 * PRICE),
    }


def test_a_failed_call_is_an_error_span_with_its_error_type(otel: Telemetry) -> None:
    with ExecutionContext(LIMITS) as ctx:
        with pytest.raises(ProviderDown):
            ctx.call_llm(down, options=GPT4O)
        with pytest.raises(KeyError):
            ctx.call_tool(
                dict[str, str]().__getitem__, "missing", options=WrapOptions(operation_name="lookup")
            )
    llm, tool = otel.spans("chat gpt-4o")[0], otel.span("execute_tool lookup")
    assert llm.status.status_code is StatusCode.ERROR and llm.status.description == "503 from the provider"
    assert attrs(llm)["error.type"] == f"{__name__}.ProviderDown"
    assert attrs(llm)["veronica.status"] == "error"
    assert "gen_ai.usage.input_tokens" not in attrs(llm)
    assert tool.status.status_code is StatusCode.ERROR and attrs(tool)["error.type"] == "KeyError"


def test_the_halt_event_is_on_the_span_current_where_the_call_was_refused(otel: Telemetry) -> None:
    tracer = otel.tracer_provider.get_tracer("test")
    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=2, max_retries_total=0))

    def agent() -> None:
        while True:  # a runaway loop inside a tool: the third step is refused in here
            ctx.call_llm(completion, options=GPT4O)

    with tracer.start_as_current_span("request"), ctx:
        with pytest.raises(ExecutionHalted):
            ctx.call_tool(agent, options=WrapOptions(operation_name="agent"))
    tool = otel.span("execute_tool agent")
    assert len(otel.spans("chat gpt-4o")) == 1  # the refused call never ran: no span
    (event,) = tool.events
    assert event.name == "veronica.halt"
    assert attrs(event) == {
        "veronica.reason": "step_limit",
        "veronica.detail": "max_steps=2 reached",
        "veronica.steps_used": 2,
        "veronica.cost_usd_used": pytest.approx(PRICE),
        "veronica.chain_id": ctx.chain_id,
    }
    assert attrs(tool)["veronica.status"] == "halted"
    assert tool.status.status_code is StatusCode.UNSET  # a halt is the bound working, not a failure
    assert not otel.span("request").events
    assert otel.halts() == {"step_limit": 1}


def test_a_timeout_fired_by_the_pool_thread_is_recorded_on_the_context_span(otel: Telemetry) -> None:
    tracer = otel.tracer_provider.get_tracer("test")
    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0, timeout_ms=50))

    def slow_tool() -> str:
        deadline = time.monotonic() + 10  # hang guard only
        while not ctx.aborted and time.monotonic() < deadline:
            time.sleep(0.005)
        return "done late"

    with tracer.start_as_current_span("request"), ctx:
        ctx.call_tool(slow_tool, options=WrapOptions(operation_name="slow"))
        assert ctx.abort_reason == "timeout"
    (event,) = otel.span("request").events
    assert event.name == "veronica.halt" and attrs(event)["veronica.reason"] == "timeout"
    assert not otel.span("execute_tool slow").events


def test_begin_call_spans_are_kept_off_the_context_and_may_end_elsewhere(
    otel: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    tracer = otel.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("request") as request, ExecutionContext(LIMITS) as ctx:
        node = ctx.begin_call("llm", WrapOptions(model="gpt-4o"))
        assert trace.get_current_span() is request  # a callback-style call may end on another thread
        ender = threading.Thread(
            target=node.commit, kwargs={"usage": {"input_tokens": 1000, "output_tokens": 500}}
        )
        with caplog.at_level(logging.WARNING):
            ender.start()
            ender.join(10)
    span = otel.span("chat gpt-4o")
    assert span.parent is not None and span.parent.span_id == otel.span("request").context.span_id
    assert attrs(span)["gen_ai.usage.output_tokens"] == 500
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_begin_call_under_a_kernel_parent_nests_under_its_span(otel: Telemetry) -> None:
    with ExecutionContext(LIMITS) as ctx:
        outer = ctx.begin_call("tool", WrapOptions(operation_name="graph-node"))
        inner = ctx.begin_call("llm", WrapOptions(model="gpt-4o"), parent_id=outer.node_id)
        inner.commit(completion())
        outer.commit("ok")
    assert otel.span("chat gpt-4o").parent.span_id == otel.span("execute_tool graph-node").context.span_id  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_async_calls_in_concurrent_tasks_nest_under_the_tool_that_started_them(otel: Telemetry) -> None:
    async def fan_out() -> list[Any]:
        return list(await asyncio.gather(*(ctx.acall_llm(completion, options=GPT4O) for _ in range(3))))

    async with ExecutionContext(LIMITS) as ctx:
        assert len(await ctx.acall_tool(fan_out, options=WrapOptions(operation_name="fan_out"))) == 3
        assert not trace.get_current_span().get_span_context().is_valid
    tool = otel.span("execute_tool fan_out")
    assert len(children_of(tool, otel.spans("chat gpt-4o"))) == 3
    assert sorted(int(attrs(s)["veronica.step"]) for s in otel.spans("chat gpt-4o")) == [2, 3, 4]


@pytest.mark.anyio
async def test_a_cancelled_call_is_interrupted(otel: Telemetry) -> None:
    started = asyncio.Event()

    async def hang() -> None:
        started.set()
        await asyncio.sleep(30)

    async with ExecutionContext(LIMITS) as ctx:
        task = asyncio.ensure_future(ctx.acall_llm(hang, options=GPT4O))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    span = otel.span("chat gpt-4o")
    assert attrs(span)["veronica.status"] == "interrupted"
    assert attrs(span)["error.type"] == "asyncio.exceptions.CancelledError"
    assert span.status.status_code is StatusCode.ERROR


def test_span_names_follow_the_operation_and_the_requested_model(otel: Telemetry) -> None:
    with ExecutionContext(LIMITS) as ctx:
        ctx.call_llm(
            lambda: [0.1, 0.2],
            options=WrapOptions(
                model="text-embedding-3-small", gen_ai_operation="embeddings", cost_fn=lambda r: 0
            ),
        )
        ctx.call_llm(lambda: "no model known")  # nothing named the model: the span is just "chat"
        ctx.call_tool(lambda: 1)  # an unnamed tool
        node = ctx.begin_call("llm", WrapOptions(model="gpt-4o"))
        node.release()  # never ran: its step is given back, its span says so
    assert [s.name for s in otel.spans()] == [
        "embeddings text-embedding-3-small",
        "chat",
        "execute_tool tool",
        "chat gpt-4o",
    ]
    embeddings, bare, _, released = otel.spans()
    assert attrs(embeddings)["gen_ai.operation.name"] == "embeddings"
    assert "gen_ai.request.model" not in attrs(bare)
    assert attrs(released)["veronica.status"] == "released"


def test_metrics_have_the_conventional_names_units_and_only_low_cardinality_attributes(
    otel: Telemetry,
) -> None:
    for _ in range(2):  # two requests: the series are shared, never per chain
        ctx = ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=3, max_retries_total=3))
        ctx.call_llm(completion, options=GPT4O)
        ctx.call_tool(lambda: "hit", options=WrapOptions(operation_name="search"))
        with pytest.raises(ProviderDown):
            ctx.call_llm(down, options=GPT4O)
        with pytest.raises(ExecutionHalted):
            ctx.call_tool(lambda: None)
    points = otel.collect()
    assert {name: points[f"{name}:unit"] for name in points if not name.endswith(":unit")} == {
        "gen_ai.client.token.usage": ["{token}"],
        "gen_ai.client.operation.duration": ["s"],
        "veronica.cost": ["USD"],
        "veronica.calls": ["{call}"],
        "veronica.halts": ["{halt}"],
    }
    model = {
        ("gen_ai.operation.name", "chat"),
        ("gen_ai.provider.name", "openai"),
        ("gen_ai.request.model", "gpt-4o"),
    }
    answered = frozenset(model | {("gen_ai.response.model", "gpt-4o-2024-08-06")})
    tokens = otel.values(points["gen_ai.client.token.usage"])
    assert tokens == {
        answered | {("gen_ai.token.type", "input")}: (2, 2000),
        answered | {("gen_ai.token.type", "output")}: (2, 1000),
    }
    durations = otel.values(points["gen_ai.client.operation.duration"])
    assert {key: count for key, (count, _) in durations.items()} == {
        answered: 2,
        frozenset(model | {("error.type", f"{__name__}.ProviderDown")}): 2,
    }
    assert otel.values(points["veronica.cost"]) == {answered: pytest.approx(2 * PRICE)}
    assert otel.values(points["veronica.calls"]) == {
        frozenset({("gen_ai.operation.name", "chat"), ("veronica.status", "ok")}): 2,
        frozenset({("gen_ai.operation.name", "chat"), ("veronica.status", "error")}): 2,
        frozenset({("gen_ai.operation.name", "execute_tool"), ("veronica.status", "ok")}): 2,
    }
    assert otel.values(points["veronica.halts"]) == {frozenset({("veronica.reason", "step_limit")}): 2}


class Downgrade:
    """A policy sending model calls to a cheaper model (issue 16's MODIFY decision)."""

    policy_type = "downgrade"

    def check(self, context: PolicyContext) -> PolicyDecision:
        return PolicyDecision(allowed=True, policy_type=self.policy_type, fallback_model="gpt-4o-mini")

    def reset(self) -> None:
        pass


def test_a_downgraded_call_is_named_after_the_model_it_was_sent_to(otel: Telemetry) -> None:
    with ExecutionContext(LIMITS, pipeline=PolicyPipeline([Downgrade()])) as ctx:
        node = ctx.begin_call("llm", WrapOptions(model="gpt-4o"))
        assert node.fallback_model == "gpt-4o-mini"
        node.downgraded("gpt-4o")  # the adapter sent the request to the fallback
        node.commit(usage={"input_tokens": 1000, "output_tokens": 500}, model="gpt-4o-mini")
    span = otel.span("chat gpt-4o-mini")
    assert attrs(span)["gen_ai.request.model"] == "gpt-4o-mini"
    assert attrs(span)["veronica.requested_model"] == "gpt-4o"
    (event,) = span.events  # on the call's own span
    assert event.name == "veronica.downgraded" and attrs(event)["veronica.to_model"] == "gpt-4o-mini"
    tokens = otel.values(otel.collect()["gen_ai.client.token.usage"])
    assert {dict(key)["gen_ai.request.model"] for key in tokens} == {"gpt-4o-mini"}


def test_an_output_that_fails_its_check_is_a_rejected_error_span(otel: Telemetry) -> None:
    tracer = otel.tracer_provider.get_tracer("test")
    ctx = ExecutionContext(LIMITS, checks=[(MaxLength(3), "halt")])
    with tracer.start_as_current_span("request"), ctx:
        with pytest.raises(ExecutionHalted):
            ctx.call_llm(lambda: "far too long an answer", options=GPT4O)
    span = otel.span("chat gpt-4o")
    assert attrs(span)["veronica.status"] == "rejected"
    assert attrs(span)["error.type"] == "veronica_mw.kernel.exceptions.OutputRejected"
    assert span.status.status_code is StatusCode.ERROR
    assert [attrs(e)["veronica.reason"] for e in otel.span("request").events] == ["verification_failed"]
    assert otel.halts() == {"verification_failed": 1}


def test_context_events_become_span_events_where_they_happened(otel: Telemetry) -> None:
    with ExecutionContext(LIMITS) as ctx:
        # usage without a model name: the kernel keeps the hint and says so, inside the call
        ctx.call_llm(lambda: {"usage": {"input_tokens": 5, "output_tokens": 1}})
    (event,) = otel.span("chat").events
    assert event.name == "veronica.unpriced"
    assert "without a model name" in attrs(event)["veronica.detail"]


def test_a_sub_agents_context_reports_its_calls_and_one_halt(otel: Telemetry) -> None:
    tracer = otel.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("request"):
        with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=3, max_retries_total=0)) as parent:
            with parent.child("researcher", max_steps=10) as sub, pytest.raises(ExecutionHalted):
                for _ in range(5):  # the parent's three steps run out first
                    sub.call_tool(len, "x", options=WrapOptions(operation_name="search"))
    tools = otel.spans("execute_tool search")
    assert [attrs(s)["veronica.chain_id"] for s in tools] == [sub.chain_id] * 3
    assert [attrs(s)["veronica.parent_chain_id"] for s in tools] == [parent.chain_id] * 3
    request = otel.span("request")
    assert attrs(request)["veronica.chain_id"] == parent.chain_id  # the root's, not the sub-agent's
    assert [(e.name, attrs(e)["veronica.chain_id"]) for e in request.events] == [
        ("veronica.halt", parent.chain_id)
    ]
    assert otel.halts() == {"step_limit": 1}  # one refusal, one halt, however many contexts it stops
