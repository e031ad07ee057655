"""FitOutputToBudget's ``modified`` event on the call's span, through the real OpenTelemetry SDK: the
span of a fitted model call carries the output limit it was sent with as attributes (and the event)."""

from __future__ import annotations

from veronica_mw import ExecutionConfig, ExecutionContext, FitOutputToBudget, PolicyPipeline, TokenUsage

# The adapters are type-checked in their own envs (tools/typecheck_adapters.py), not in this one.
from veronica_mw.adapters._provider_calls import Plan, begin  # type: ignore[import-not-found,unused-ignore]
from veronica_mw.adapters._provider_estimate import worst_case  # type: ignore[import-not-found,unused-ignore]

from .otel_support import Telemetry, attrs, otel

__all__ = ["otel"]  # the fixture, re-exported for pytest

MODEL = "gpt-4o-mini"
CEILING = worst_case(MODEL, "openai", 20, 1000) or 0.0


def _call(ctx: ExecutionContext) -> Plan:
    # what the OpenAI adapter plans for a chat request that sets no max tokens (4096 assumed)
    plan = Plan("openai.chat.completions", MODEL, "openai", 20, 4096, "max_completion_tokens")
    call = begin(ctx, plan)
    call.finish((TokenUsage(20, 30), MODEL, 0))
    return plan


def test_a_fitted_call_records_the_limit_it_was_sent_with_on_its_span(otel: Telemetry) -> None:
    config = ExecutionConfig(max_cost_usd=CEILING, max_steps=5, max_retries_total=0)
    with ExecutionContext(config, PolicyPipeline([FitOutputToBudget()])) as ctx:
        plan = _call(ctx)
    assert plan.fitted is not None and 256 <= plan.fitted < 4096
    span = otel.span(f"chat {MODEL}")
    found = attrs(span)
    assert found["gen_ai.request.max_tokens"] == plan.fitted
    assert found["veronica.fit_output.max_tokens"] == plan.fitted
    assert found["veronica.fit_output.requested_max_tokens"] == 4096
    assert found["veronica.fit_output.field"] == "max_completion_tokens"
    (event,) = [e for e in span.events if e.name == "veronica.modified"]
    assert attrs(event)["veronica.fitted"] == plan.fitted
    assert ctx.graph.nodes()[0].status == "ok"


def test_a_call_that_fits_has_no_fit_attributes(otel: Telemetry) -> None:
    pipeline = PolicyPipeline([FitOutputToBudget()])
    with ExecutionContext(
        ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0), pipeline
    ) as ctx:
        plan = _call(ctx)
    assert plan.fitted is None
    found = attrs(otel.span(f"chat {MODEL}"))
    assert not [key for key in found if key.startswith("veronica.fit_output")]
    assert "gen_ai.request.max_tokens" not in found
