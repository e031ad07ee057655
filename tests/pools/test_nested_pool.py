"""A tenant pool above a tree of contexts: every call is reserved in the pool once, however deep."""

from __future__ import annotations

import pytest

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, WrapOptions
from veronica_mw.pools.budget_pool import BudgetPool

CONFIG = ExecutionConfig(max_cost_usd=10.0, max_steps=100, max_retries_total=0)


def tenant(_: object) -> str:
    return "acme"


def test_a_three_deep_call_is_reserved_and_settled_in_the_pool_once() -> None:
    pool = BudgetPool(1.0, window_s="day", key_func=tenant)
    request = ExecutionContext(CONFIG, budget_parent=pool.ledger("acme"), name="request")
    leaf = request.child("agent").child("tool-runner")
    node = leaf.begin_call("llm", WrapOptions(cost_estimate_hint=0.2))
    assert pool.usage("acme").reserved_usd == pytest.approx(0.2)  # not 0.6
    node.commit(cost_usd=0.1)
    usage = pool.usage("acme")
    assert usage.spent_usd == pytest.approx(0.1) and (usage.reserved_usd, usage.steps) == (0.0, 1)
    assert request.get_snapshot().cost_usd_accumulated == pytest.approx(0.1)


def test_a_pool_refusal_halts_the_nested_context_that_asked() -> None:
    pool = BudgetPool(0.25, window_s="day", key_func=tenant)
    request = ExecutionContext(CONFIG, budget_parent=pool.ledger("acme"), name="request")
    agent = request.child("agent")
    agent.call_llm(lambda: "ok", options=WrapOptions(cost_estimate_hint=0.2))
    ran = []
    with pytest.raises(ExecutionHalted) as halted:
        agent.call_llm(lambda: ran.append(1), options=WrapOptions(cost_estimate_hint=0.2))
    assert ran == [] and halted.value.reason == "budget_exceeded"
    assert halted.value.retry_after_s is not None  # the pool's window says when to come back
    # Nothing of the refused call is left anywhere.
    for ctx in (request, agent):
        snap = ctx.get_snapshot()
        assert (snap.step_count, snap.in_flight, snap.cost_usd_reserved) == (1, 0, 0.0)
    assert pool.usage("acme").reserved_usd == 0.0


def test_a_child_with_its_own_pool_reserves_in_both_pools() -> None:
    team = BudgetPool(1.0, window_s="day", key_func=tenant, name="team")
    user = BudgetPool(0.15, window_s="day", key_func=tenant, name="user")
    request = ExecutionContext(CONFIG, budget_parent=team.ledger("acme"))
    agent = ExecutionContext(CONFIG, parent=request, budget_parent=user.ledger("acme"))
    agent.call_llm(lambda: "ok", options=WrapOptions(cost_estimate_hint=0.1))
    with pytest.raises(ExecutionHalted):
        agent.call_llm(lambda: "ok", options=WrapOptions(cost_estimate_hint=0.1))
    assert team.usage("acme").spent_usd == pytest.approx(0.1)
    assert user.usage("acme").spent_usd == pytest.approx(0.1)
    assert team.usage("acme").reserved_usd == user.usage("acme").reserved_usd == 0.0
