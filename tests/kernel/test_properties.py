"""Hypothesis: random sequences of calls, failures, costs and cancellations never break a limit."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from veronica_mw import (
    BudgetEnforcer,
    Decision,
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    WrapOptions,
)

action = st.one_of(
    st.tuples(st.just("llm"), st.floats(0, 0.5, allow_nan=False)),
    st.tuples(st.just("tool"), st.floats(0, 0.2, allow_nan=False)),
    st.tuples(st.just("fail"), st.just(0.0)),
    st.tuples(st.just("cancel"), st.just(0.0)),
)


class Boom(Exception):
    pass


def _constant(amount: float) -> Callable[[object], float]:
    return lambda _: amount


def _boom() -> None:
    raise Boom()


@settings(max_examples=300, deadline=None)
@given(
    cost=st.floats(0, 3, allow_nan=False),
    steps=st.integers(0, 30),
    retries=st.integers(0, 5),
    actions=st.lists(action, max_size=60),
)
def test_random_sequences_respect_every_limit(
    cost: float, steps: int, retries: int, actions: list[tuple[str, float]]
) -> None:
    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=cost, max_steps=steps, max_retries_total=retries))
    executed = failures = 0
    halted_at: int | None = None
    for i, (kind, amount) in enumerate(actions):
        before = executed + failures
        if kind == "cancel":
            ctx.cancel("property test")
        elif kind == "fail":
            try:
                ctx.call_tool(_boom)
            except Boom:
                failures += 1
            except ExecutionHalted:
                pass
        else:
            opts = WrapOptions(cost_estimate_hint=amount, cost_fn=_constant(amount))
            wrap = ctx.wrap_llm_call if kind == "llm" else ctx.wrap_tool_call

            def body() -> None:
                nonlocal executed
                executed += 1

            wrap(body, opts)
        if halted_at is not None:
            assert executed + failures == before, "a call ran after the context halted"
        if ctx.aborted and halted_at is None:
            halted_at = i
    snap = ctx.get_snapshot()
    assert snap.cost_usd_accumulated <= cost + 1e-9
    assert snap.step_count == executed + failures <= steps
    assert snap.retries_used <= retries
    assert failures <= retries + 1
    assert snap.in_flight == 0
    if snap.aborted:
        assert snap.abort_reason in {"budget_exceeded", "step_limit", "retry_limit", "cancelled"}
        assert ctx.wrap_tool_call(lambda: None) is Decision.HALT


@settings(max_examples=200, deadline=None)
@given(
    limit=st.floats(0, 10, allow_nan=False), amounts=st.lists(st.floats(0, 3, allow_nan=False), max_size=40)
)
def test_budget_enforcer_never_exceeds(limit: float, amounts: list[float]) -> None:
    budget = BudgetEnforcer(limit)
    accepted = [a for a in amounts if budget.spend(a)]
    assert budget.spent_usd <= limit
    assert budget.spent_usd == sum(accepted) or abs(budget.spent_usd - sum(accepted)) < 1e-9
