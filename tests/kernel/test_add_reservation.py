"""``CallNode.add_reservation``: a layer underneath the one that began a step reserves the call's
worst case before sending it (provider SDK instrumentation adopting a framework's step)."""

from __future__ import annotations

import pytest

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted


def test_more_is_reserved_and_released_at_settlement() -> None:
    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0))
    node = ctx.begin_call("llm")
    node.add_reservation(0.4)
    assert node.reserved_usd == pytest.approx(0.4) and ctx.get_snapshot().cost_usd_reserved == pytest.approx(
        0.4
    )
    node.commit(cost_usd=0.1)
    snap = ctx.get_snapshot()
    assert snap.cost_usd_reserved == pytest.approx(0.0) and snap.cost_usd_accumulated == pytest.approx(0.1)


def test_crossing_the_ceiling_halts_and_leaves_the_node_running() -> None:
    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0))
    first = ctx.begin_call("llm", key="a")
    first.add_reservation(0.7)
    second = ctx.begin_call("llm", key="b")
    with pytest.raises(ExecutionHalted) as halted:
        second.add_reservation(0.5)
    assert halted.value.reason == "budget_exceeded"
    assert not second.settled and second.reserved_usd == 0.0
    second.release()
    assert ctx.get_snapshot().cost_usd_reserved == pytest.approx(0.7)


def test_zero_is_always_granted_even_after_a_halt() -> None:
    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0))
    node = ctx.begin_call("llm")
    ctx.cancel("stop")
    node.add_reservation(0.0)  # admitted already: sent as it is
    with pytest.raises(ExecutionHalted, match="cancelled"):
        node.add_reservation(0.01)


def test_a_bad_amount_is_refused() -> None:
    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0))
    node = ctx.begin_call("llm")
    with pytest.raises(ValueError):
        node.add_reservation(-1.0)


def test_the_parent_budget_is_reserved_too() -> None:
    class Parent:
        def __init__(self) -> None:
            self.reserved = 0.0

        def reserve(self, amount_usd: float) -> bool:
            if self.reserved + amount_usd > 0.5:
                return False
            self.reserved += amount_usd
            return True

        def settle(self, reserved_usd: float, actual_usd: float) -> None:
            self.reserved -= reserved_usd

        def retry_after_s(self) -> float | None:
            return None

    parent = Parent()
    ctx = ExecutionContext(
        ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0), budget_parent=parent
    )
    node = ctx.begin_call("llm")
    node.add_reservation(0.3)
    assert parent.reserved == pytest.approx(0.3)
    with pytest.raises(ExecutionHalted):
        node.add_reservation(0.3)  # the tenant pool has no room left
    assert node.reserved_usd == pytest.approx(0.3) and parent.reserved == pytest.approx(0.3)
    node.commit(cost_usd=0.1)
    assert parent.reserved == pytest.approx(0.0)
