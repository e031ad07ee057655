"""Output check results and downgrades on model-call spans (the GenAI evaluation event)."""

from __future__ import annotations

import pytest

from veronica_mw import (
    CheckResult,
    DowngradeAt,
    ExecutionConfig,
    ExecutionContext,
    MaxLength,
    ModelOutput,
    OutputRejected,
    PolicyPipeline,
    WrapOptions,
)

from .otel_support import Telemetry, attrs, otel

__all__ = ["otel"]

LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=3)


def relevance(output: ModelOutput) -> CheckResult:
    score = 0.9 if "Oslo" in output.text else 0.1
    return CheckResult(score > 0.5, "relevance", "" if score > 0.5 else "does not name the city", score)


def evaluations(otel: Telemetry, name: str) -> list[dict[str, object]]:
    return [attrs(e) for s in otel.spans(name) for e in s.events if e.name == "gen_ai.evaluation.result"]


def test_every_check_result_is_an_evaluation_event(otel: Telemetry) -> None:
    with ExecutionContext(LIMITS, checks=[relevance, MaxLength(100)]) as ctx:
        ctx.call_llm(lambda: "Sunny in Oslo", options=WrapOptions(operation_name="chat"))
    assert evaluations(otel, "chat") == [
        {
            "gen_ai.evaluation.name": "relevance",
            "gen_ai.evaluation.score.label": "pass",
            "gen_ai.evaluation.score.value": 0.9,
        },
        {"gen_ai.evaluation.name": "max_length", "gen_ai.evaluation.score.label": "pass"},
    ]


def test_a_failed_check_has_its_explanation(otel: Telemetry) -> None:
    with ExecutionContext(LIMITS, checks=[relevance]) as ctx, pytest.raises(OutputRejected):
        ctx.call_llm(lambda: "Sunny somewhere", options=WrapOptions(operation_name="chat"))
    (event,) = evaluations(otel, "chat")
    assert event == {
        "gen_ai.evaluation.name": "relevance",
        "gen_ai.evaluation.score.label": "fail",
        "gen_ai.evaluation.score.value": 0.1,
        "gen_ai.evaluation.explanation": "does not name the city",
    }


def test_each_downgraded_call_is_named_after_its_fallback(otel: Telemetry) -> None:
    pipeline = PolicyPipeline([DowngradeAt(0.0, "gpt-4o-mini")])
    with ExecutionContext(LIMITS, pipeline) as ctx:
        for _ in range(3):
            node = ctx.begin_call("llm", WrapOptions(model="gpt-4o"))
            node.downgraded("gpt-4o")
            node.commit(usage={"input_tokens": 10, "output_tokens": 5}, model="gpt-4o-mini")
    spans = otel.spans("chat gpt-4o-mini")
    assert len(spans) == 3 and all(attrs(s)["gen_ai.request.model"] == "gpt-4o-mini" for s in spans)
