"""Nested contexts never escape the enclosing limits: every call of a child counts in each ancestor."""

from __future__ import annotations

import asyncio
import time

import pytest

from veronica_mw import (
    AgentStepGuard,
    CircuitBreaker,
    ContextBinding,
    Decision,
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    Observer,
    PolicyPipeline,
    RetryContainer,
    WrapOptions,
    get_current_execution_context,
)
from veronica_mw.kernel.context import PendingContext, current_context
from veronica_mw.kernel.graph import CallNode

HINT = WrapOptions(cost_estimate_hint=0.1)


def cfg(cost: float = 100.0, steps: int = 1000, retries: int = 100, timeout_ms: float = 0) -> ExecutionConfig:
    return ExecutionConfig(cost, steps, retries, timeout_ms)


def test_the_issue_repro_inner_context_cannot_outrun_the_outer_step_limit() -> None:
    ran = 0

    def model() -> str:
        nonlocal ran
        ran += 1
        return "ok"

    with ExecutionContext(cfg(cost=1, steps=5, retries=0), name="request") as outer:
        with ExecutionContext(cfg(cost=1, steps=100, retries=0)) as inner:
            with pytest.raises(ExecutionHalted) as halted:
                for _ in range(20):
                    inner.call_llm(model)
    assert ran == 5
    assert inner.parent is outer and outer.children == [inner]
    assert outer.get_snapshot().step_count == 5 and inner.get_snapshot().step_count == 5
    assert halted.value.reason == "step_limit"
    assert f"ancestor 'request' [chain {outer.chain_id}]" in halted.value.detail
    assert "max_steps=5 reached" in halted.value.detail
    assert outer.abort_reason == "step_limit"  # the outer's own limit was reached


def test_cost_is_reserved_in_every_ancestor_before_the_call_runs() -> None:
    root = ExecutionContext(cfg(cost=1.0), name="root")
    mid = ExecutionContext(cfg(cost=10.0), parent=root, name="mid")
    leaf = ExecutionContext(cfg(cost=10.0), parent=mid, name="leaf")
    node = leaf.begin_call("llm", WrapOptions(cost_estimate_hint=0.4))
    for ctx in (root, mid, leaf):
        snap = ctx.get_snapshot()
        assert (snap.step_count, snap.in_flight) == (1, 1)
        assert snap.cost_usd_reserved == pytest.approx(0.4)
    node.commit(cost_usd=0.25)
    for ctx in (root, mid, leaf):
        snap = ctx.get_snapshot()
        assert snap.in_flight == 0 and snap.cost_usd_reserved == pytest.approx(0.0)
        assert snap.cost_usd_accumulated == pytest.approx(0.25)


def test_a_reservation_too_big_for_the_parent_halts_only_the_child() -> None:
    parent = ExecutionContext(cfg(cost=1.0), name="coordinator")
    big = parent.child("big", max_cost_usd=5.0)
    small = parent.child("small")
    assert big.call_llm(lambda: "a", options=WrapOptions(cost_estimate_hint=0.5)) == "a"
    ran = []
    with pytest.raises(ExecutionHalted) as halted:
        big.call_llm(lambda: ran.append(1), options=WrapOptions(cost_estimate_hint=0.6))
    assert ran == []  # refused before it ran
    assert halted.value.reason == "budget_exceeded" and "ancestor 'coordinator'" in halted.value.detail
    assert big.aborted and not parent.aborted  # the coordinator still has $0.50 left
    assert small.call_llm(lambda: "b", options=WrapOptions(cost_estimate_hint=0.4)) == "b"
    assert parent.get_snapshot().cost_usd_accumulated == pytest.approx(0.9)


def test_a_spent_parent_budget_halts_the_parent_too() -> None:
    parent = ExecutionContext(cfg(cost=0.3))
    child = parent.child("worker", max_cost_usd=5.0)
    for _ in range(3):
        child.call_llm(lambda: "x", options=HINT)
    with pytest.raises(ExecutionHalted):
        child.call_llm(lambda: "x", options=HINT)
    assert parent.abort_reason == "budget_exceeded"


def test_an_actual_cost_past_an_ancestor_ceiling_halts_it_and_its_children() -> None:
    parent = ExecutionContext(cfg(cost=1.0), name="p")
    child = parent.child("c", max_cost_usd=10.0)
    sibling = parent.child("s")
    node = child.begin_call("llm", WrapOptions(cost_estimate_hint=0.1))
    assert node.commit(cost_usd=1.5) is Decision.HALT  # it already ran; it is the last
    assert parent.abort_reason == "budget_exceeded"
    assert child.aborted and sibling.aborted  # both learn it at once
    assert sibling.get_snapshot().abort_detail.startswith("ancestor 'p'")


def test_a_child_at_its_own_limit_leaves_the_parent_running() -> None:
    parent = ExecutionContext(cfg(steps=10))
    child = parent.child("sub", max_steps=2)
    child.call_tool(lambda: 1)
    child.call_tool(lambda: 2)
    with pytest.raises(ExecutionHalted) as halted:
        child.call_tool(lambda: 3)
    assert halted.value.detail == "max_steps=2 reached"
    assert not parent.aborted
    assert parent.call_tool(lambda: 4) == 4
    assert parent.get_snapshot().step_count == 3


def test_retries_are_drawn_in_every_ancestor() -> None:
    parent = ExecutionContext(cfg(retries=2), name="p")
    child = parent.child("c", max_retries_total=10)

    def flaky() -> None:
        raise OSError("down")

    for _ in range(2):
        with pytest.raises(OSError):
            child.call_llm(flaky)
    assert parent.get_snapshot().retries_used == child.get_snapshot().retries_used == 2
    with pytest.raises(OSError):
        child.call_llm(flaky)  # the call ran and failed; no retry is left for it
    assert child.abort_reason == parent.abort_reason == "retry_limit"
    assert child.get_snapshot().abort_detail.startswith("ancestor 'p'")


def test_retry_container_in_the_parent_does_not_draw_a_childs_failure_twice() -> None:
    parent = ExecutionContext(cfg(retries=10))
    child = parent.child("c")
    calls = 0

    def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise OSError("down")
        return "ok"

    with parent:
        result = RetryContainer(3, backoff_base=0.0, jitter=0.0).execute(child.call_llm, flaky)
    assert result == "ok"
    assert parent.get_snapshot().retries_used == child.get_snapshot().retries_used == 2


def test_cancel_of_an_ancestor_halts_every_descendant_at_its_next_call() -> None:
    root = ExecutionContext(cfg(), name="root")
    child = root.child("child")
    grandchild = child.child("grandchild")
    token = grandchild.cancellation_token  # a token holder learns of it at once
    root.cancel("user pressed stop")
    assert token.is_cancelled and token.reason == "cancelled"
    with pytest.raises(ExecutionHalted) as halted:
        child.call_tool(lambda: None)
    assert halted.value.reason == "cancelled" and "ancestor 'root'" in halted.value.detail
    assert grandchild.abort_reason == "cancelled"


def test_an_ancestor_timeout_stops_calls_in_nested_contexts() -> None:
    with ExecutionContext(cfg(timeout_ms=30), name="session") as session:
        inner = ExecutionContext(cfg())  # no deadline of its own
        deadline = time.monotonic() + 30
        while not session.aborted and time.monotonic() < deadline:
            time.sleep(0.005)  # the shared timeout pool fires the session's deadline
        with pytest.raises(ExecutionHalted) as halted:
            inner.call_llm(lambda: "never")
    assert halted.value.reason == "timeout" and "ancestor 'session'" in halted.value.detail


def test_an_unarmed_ancestor_deadline_is_checked_at_the_childs_call() -> None:
    parent = ExecutionContext(cfg(timeout_ms=1))  # never entered: no timer
    child = parent.child("c", timeout_ms=0)
    time.sleep(0.01)  # well past the parent's 1 ms deadline, which no timer fires
    with pytest.raises(ExecutionHalted) as halted:
        child.call_tool(lambda: None)
    assert halted.value.reason == "timeout" and parent.abort_reason == "timeout"


def test_parent_none_detaches_and_parent_ctx_binds_explicitly() -> None:
    outer = ExecutionContext(cfg(steps=1))
    other = ExecutionContext(cfg(steps=1))
    with outer:
        detached = ExecutionContext(cfg(), parent=None)
        bound = ExecutionContext(cfg(), parent=other)
        for _ in range(3):
            detached.call_tool(lambda: None)
        bound.call_tool(lambda: None)
    assert detached.parent is None and outer.get_snapshot().step_count == 0
    assert bound.parent is other and other.get_snapshot().step_count == 1
    with pytest.raises(TypeError, match="parent"):
        ExecutionContext(cfg(), parent="outer")  # type: ignore[arg-type]


def test_a_context_entered_inside_another_becomes_its_child_unless_already_used() -> None:
    fresh = ExecutionContext(cfg())
    used = ExecutionContext(cfg())
    used.call_tool(lambda: None)
    with ExecutionContext(cfg(steps=5)) as outer:
        with fresh:
            fresh.call_tool(lambda: None)
        with used:  # its past call was never checked against the outer: it stays a root
            used.call_tool(lambda: None)
    assert fresh.parent is outer and used.parent is None
    assert outer.get_snapshot().step_count == 1


def test_reentering_a_context_inside_itself_or_a_child_makes_no_cycle() -> None:
    parent = ExecutionContext(cfg())
    with parent:
        child = ExecutionContext(cfg())
        with child, parent:
            parent.call_tool(lambda: None)
    assert child.parent is parent and parent.parent is None


def test_a_context_built_inside_a_pending_request_context_nests_in_it() -> None:
    request = ExecutionContext(cfg(steps=2), name="request")
    token = current_context.set(PendingContext(lambda: request))
    try:
        inner = ExecutionContext(cfg())
        # A factory that builds its context without a parent must not deadlock on itself.
        pending = PendingContext(lambda: ExecutionContext(cfg()))
        current_context.set(pending)
        built = get_current_execution_context()
    finally:
        current_context.reset(token)
    assert inner.parent is request
    assert built is not None and built.parent is None


def test_the_adapter_binding_rule_with_nesting() -> None:
    binding = ContextBinding(config=cfg(steps=3))
    owned = binding.resolve()  # built with nothing current: a root
    assert owned is not None and owned.parent is None
    with ExecutionContext(cfg()) as request:
        assert binding.resolve() is request  # the current context wins, as before


def test_children_inherit_observers_breaker_and_on_warn() -> None:
    seen: list[tuple[str, str]] = []

    class Audit(Observer):
        def call_started(self, ctx: ExecutionContext, node: CallNode) -> None:
            seen.append((ctx.name, node.name))

    breaker = CircuitBreaker(failure_threshold=1, recovery_timeout=60)
    parent = ExecutionContext(cfg(), circuit_breaker=breaker, observers=[Audit()], name="p")
    child = parent.child("c")
    child.call_tool(lambda: None, options=WrapOptions(operation_name="search"))
    assert seen == [("c", "search")]
    breaker.record_failure()  # open
    with pytest.raises(ExecutionHalted) as halted:
        child.call_tool(lambda: None)
    assert halted.value.reason == "circuit_open"


def test_ancestor_policies_see_the_childs_calls() -> None:
    parent = ExecutionContext(cfg(), pipeline=PolicyPipeline([AgentStepGuard(2)]))
    child = parent.child("c")
    child.call_tool(lambda: None)
    child.call_tool(lambda: None)
    with pytest.raises(ExecutionHalted) as halted:
        child.call_tool(lambda: None)
    assert halted.value.reason == "policy_denied" and parent.abort_reason == "policy_denied"


def test_key_dedupes_in_a_nested_context_and_release_gives_back_every_level() -> None:
    parent = ExecutionContext(cfg())
    child = parent.child("c")
    first = child.begin_call("llm", HINT, key="run-1")
    assert child.begin_call("llm", HINT, key="run-1") is first
    assert parent.get_snapshot().step_count == 1
    first.release()
    assert parent.get_snapshot().step_count == child.get_snapshot().step_count == 0
    assert parent.get_snapshot().cost_usd_reserved == pytest.approx(0.0)


def test_interrupted_nested_call_keeps_its_reservation_as_spent_everywhere() -> None:
    parent = ExecutionContext(cfg())
    child = parent.child("c")

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        child.call_llm(interrupted, options=HINT)
    assert parent.get_snapshot().cost_usd_accumulated == pytest.approx(0.1)
    assert parent.get_snapshot().in_flight == 0


@pytest.mark.anyio
async def test_tasks_each_with_their_own_child_share_the_parents_limit() -> None:
    ran = 0

    async def model() -> str:
        nonlocal ran
        await asyncio.sleep(0)
        ran += 1
        return "ok"

    async def agent(i: int) -> None:
        async with ExecutionContext(cfg(), name=f"agent-{i}") as ctx:
            for _ in range(10):
                if await ctx.awrap_llm_call(model) is Decision.HALT:
                    return

    async with ExecutionContext(cfg(steps=25), name="coordinator") as parent:
        await asyncio.gather(*(agent(i) for i in range(5)))
    assert ran == 25 == parent.get_snapshot().step_count
    assert sum(c.get_snapshot().step_count for c in parent.children) == 25


def test_a_reservation_added_to_a_running_nested_call_is_held_in_every_level() -> None:
    parent = ExecutionContext(cfg(cost=1.0), name="p")
    child = parent.child("c", max_cost_usd=10.0)
    node = child.begin_call("llm", WrapOptions(cost_estimate_hint=0.2))
    node.add_reservation(0.3)  # a provider layer learned the call's worst case
    assert parent.get_snapshot().cost_usd_reserved == pytest.approx(0.5)
    with pytest.raises(ExecutionHalted) as halted:
        node.add_reservation(0.6)  # 0.5 + 0.6 > the parent's 1.0
    assert "ancestor 'p'" in halted.value.detail and not parent.aborted
    node.commit(cost_usd=0.4)
    for ctx in (parent, child):
        snap = ctx.get_snapshot()
        assert snap.cost_usd_reserved == pytest.approx(0.0)
        assert snap.cost_usd_accumulated == pytest.approx(0.4)
