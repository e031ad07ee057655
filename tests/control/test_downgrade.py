"""DowngradeAt through the kernel: after the threshold model calls carry a fallback, priced as such."""

from __future__ import annotations

from typing import Any

import pytest
from genai_prices import Usage, calc_price

from veronica_mw import (
    BudgetEnforcer,
    DowngradeAt,
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    PolicyContext,
    PolicyDecision,
    PolicyPipeline,
    WrapOptions,
)

USAGE = {"input_tokens": 1000, "output_tokens": 500}


def price(model: str) -> float:
    return float(calc_price(Usage(input_tokens=1000, output_tokens=500), model_ref=model).total_price)


BIG, SMALL = price("gpt-4o"), price("gpt-4o-mini")


def context(max_cost: float, *policies: Any) -> ExecutionContext:
    config = ExecutionConfig(max_cost_usd=max_cost, max_steps=1000, max_retries_total=0)
    return ExecutionContext(config, PolicyPipeline(policies or [DowngradeAt(0.8, "gpt-4o-mini")]))


def agent_call(ctx: ExecutionContext, hint: float = 0.0) -> tuple[str | None, float]:
    """What an adapter that controls the request does: send it with the fallback when there is one."""
    node = ctx.begin_call("llm", WrapOptions(operation_name="chat", model="gpt-4o", cost_estimate_hint=hint))
    reserved = node.reserved_usd
    sent_with = node.fallback_model or "gpt-4o"
    if node.fallback_model is not None:
        node.downgraded("gpt-4o")
    node.commit({"model": sent_with, "usage": USAGE})
    return node.fallback_model, reserved


def test_calls_after_80_percent_run_on_the_fallback_and_the_ceiling_holds() -> None:
    ctx = context(10 * BIG)
    models = []
    with pytest.raises(ExecutionHalted) as info:
        for _ in range(1000):
            # The hint covers one call at the requested model's price; it is rescaled after 80%.
            fallback, _ = agent_call(ctx, hint=BIG)
            models.append(fallback or "gpt-4o")
    assert info.value.reason == "budget_exceeded"
    assert models[:8] == ["gpt-4o"] * 8  # 8 x BIG = 80% of the budget
    assert set(models[8:]) == {"gpt-4o-mini"} and len(models) > 20
    snap = ctx.get_snapshot()
    assert snap.cost_usd_accumulated <= 10 * BIG + 1e-9
    assert snap.cost_usd_accumulated == pytest.approx(8 * BIG + (len(models) - 8) * SMALL)
    downgraded = [e for e in snap.events if e.kind == "downgraded"]  # one per call (the list keeps 256)
    assert len(downgraded) == min(256, len(models) - 8)
    assert downgraded[-1].data["from_model"] == "gpt-4o" and downgraded[-1].data["to_model"] == "gpt-4o-mini"
    assert downgraded[-1].data["node_id"] == ctx.graph.nodes()[-1].node_id  # the last call that ran
    nodes = ctx.graph.nodes()
    assert [n.model for n in nodes] == models[: len(nodes)]
    assert not [e for e in snap.events if e.kind == "downgrade_unsupported"]


def test_the_reservation_is_recomputed_at_the_fallbacks_price() -> None:
    ctx = context(1.0, DowngradeAt(0.0, "gpt-4o-mini"))  # from the first call on
    fallback, reserved = agent_call(ctx, hint=0.01)
    assert fallback == "gpt-4o-mini"
    assert reserved == pytest.approx(0.01 * price_ratio())
    # A hint that only fits at the fallback's price is admitted.
    tight = context(0.0011, DowngradeAt(0.0, "gpt-4o-mini"))
    node = tight.begin_call("llm", WrapOptions(model="gpt-4o", cost_estimate_hint=0.01))
    assert node.reserved_usd < 0.0011


def price_ratio() -> float:
    def per_probe(model: str) -> float:
        return float(calc_price(Usage(input_tokens=1000, output_tokens=1000), model_ref=model).total_price)

    return per_probe("gpt-4o-mini") / per_probe("gpt-4o")


def test_where_nothing_swaps_the_model_one_event_says_so() -> None:
    ctx = context(1.0, DowngradeAt(0.0, "gpt-4o-mini"))
    for _ in range(3):  # ctx.call_llm runs the user's function as it is
        ctx.call_llm(lambda: {"model": "gpt-4o", "usage": USAGE}, options=WrapOptions(model="gpt-4o"))
    unsupported = [e for e in ctx.get_events() if e.kind == "downgrade_unsupported"]
    assert len(unsupported) == 1 and unsupported[0].data["fallback_model"] == "gpt-4o-mini"
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(3 * BIG)  # priced as what ran


def test_an_applied_fallback_is_priced_even_when_the_result_names_no_model() -> None:
    ctx = context(1.0, DowngradeAt(0.0, "gpt-4o-mini"))
    node = ctx.begin_call("llm", WrapOptions(model="gpt-4o"))
    node.downgraded()
    node.commit(usage=USAGE)
    assert node.model == "gpt-4o-mini" and node.cost_usd == pytest.approx(SMALL)


def test_tool_calls_and_same_model_fallbacks_are_left_alone() -> None:
    ctx = context(1.0, DowngradeAt(0.0, "gpt-4o-mini"))
    assert ctx.begin_call("tool", WrapOptions(operation_name="search")).fallback_model is None
    assert ctx.begin_call("llm", WrapOptions(model="gpt-4o-mini")).fallback_model is None


def test_denials_win_and_the_first_modification_counts() -> None:
    class Deny:
        policy_type = "deny"

        def check(self, context: PolicyContext) -> PolicyDecision:
            return PolicyDecision(allowed=False, policy_type="deny", reason="no")

        def reset(self) -> None:
            pass

    ctx = context(1.0, DowngradeAt(0.0, "gpt-4o-mini"), Deny())
    with pytest.raises(ExecutionHalted) as info:
        ctx.begin_call("llm", WrapOptions(model="gpt-4o"))
    assert info.value.reason == "policy_denied"
    first = context(
        1.0, BudgetEnforcer(10.0), DowngradeAt(0.0, "gpt-4o-mini"), DowngradeAt(0.0, "other-model")
    )
    assert first.begin_call("llm", WrapOptions(model="gpt-4o")).fallback_model == "gpt-4o-mini"


def test_policy_validation() -> None:
    for bad in (-0.1, 1.5, float("nan"), True, "0.8"):
        with pytest.raises(ValueError):
            DowngradeAt(bad, "gpt-4o-mini")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        DowngradeAt(0.5, "")
    policy = DowngradeAt(0.5, "m")
    below = PolicyContext(cost_usd=0.4, kind="llm", max_cost_usd=1.0)
    at = PolicyContext(cost_usd=0.5, kind="llm", max_cost_usd=1.0)
    assert policy.check(below).fallback_model is None and policy.check(at).fallback_model == "m"
    assert policy.check(PolicyContext(cost_usd=0.0, kind="llm", max_cost_usd=0.0)).fallback_model is None
