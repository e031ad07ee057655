"""Soft limits: ``warn_at`` fractions of each limit fire one event, one WARNING and ``on_warn`` once."""

from __future__ import annotations

import logging
import math
import threading
from typing import Any

import pytest

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionEvent, Observer, WrapOptions

CONFIG = {"max_cost_usd": 1.0, "max_steps": 10, "max_retries_total": 4}


def config(**overrides: Any) -> ExecutionConfig:
    return ExecutionConfig(**{**CONFIG, **overrides})


def soft(ctx: ExecutionContext) -> list[tuple[Any, ...]]:
    return [
        (e.data["dimension"], e.data["fraction"], e.data["used"], e.data["limit"])
        for e in ctx.get_events()
        if e.kind == "soft_limit"
    ]


@pytest.mark.parametrize(
    "bad",
    [(1.0,), (0.0,), (-0.2,), (1.5,), (math.nan,), (math.inf,)],
    ids=["one", "zero", "neg", "big", "nan", "inf"],
)
def test_g6_warn_at_out_of_range_is_a_value_error(bad: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="warn_at"):
        config(warn_at=bad)


@pytest.mark.parametrize("bad", [0.8, "0.8", (True,), ("0.8",), (None,), {"cost": 0.8}])
def test_g6_warn_at_of_the_wrong_type_is_a_type_error(bad: object) -> None:
    with pytest.raises(TypeError, match="warn_at"):
        config(warn_at=bad)


def test_warn_at_is_normalised_to_a_sorted_tuple() -> None:
    assert config(warn_at=[0.9, 0.5, 0.9]).warn_at == (0.5, 0.9)
    assert config().warn_at == ()
    assert hash(config(warn_at=[0.5])) == hash(config(warn_at=(0.5,)))


def test_steps_warn_once_per_fraction_with_the_call_that_reaches_it(caplog: pytest.LogCaptureFixture) -> None:
    events: list[ExecutionEvent] = []
    ctx = ExecutionContext(config(warn_at=(0.5, 0.8)), on_warn=events.append, name="agent")
    with caplog.at_level(logging.WARNING, logger="veronica_mw"):
        for i in range(10):
            ctx.call_tool(lambda: None)
            if i == 4:
                assert soft(ctx) == [("steps", 0.5, 5, 10)]  # the 5th call brought it to 50%
    assert soft(ctx) == [("steps", 0.5, 5, 10), ("steps", 0.8, 8, 10)]
    assert [e.data["context"] for e in events] == ["agent", "agent"]
    assert events[0].data["chain_id"] == ctx.chain_id
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and "soft_limit" in warnings[0].getMessage()
    assert ctx.get_snapshot().soft_limits == (("steps", 0.5), ("steps", 0.8))
    assert not ctx.aborted  # soft limits never refuse anything


def test_cost_warns_on_committed_cost_and_one_call_can_pass_several_fractions() -> None:
    ctx = ExecutionContext(config(max_steps=100, warn_at=(0.25, 0.5, 0.7)))
    ctx.call_llm(lambda: "a", options=WrapOptions(cost_fn=lambda _: 0.1))
    assert soft(ctx) == []
    ctx.call_llm(lambda: "b", options=WrapOptions(cost_fn=lambda _: 0.5))  # 0.6: passes 0.25 and 0.5
    assert [(d, f) for d, f, *_ in soft(ctx)] == [("cost", 0.25), ("cost", 0.5)]
    for _ in range(2):  # ten 0.01s: float sums still reach 0.7
        for _ in range(5):
            ctx.call_llm(lambda: "c", options=WrapOptions(cost_fn=lambda _: 0.01))
    assert [(d, f) for d, f, *_ in soft(ctx)][-1] == ("cost", 0.7)


def test_retries_warn_and_a_zero_limit_never_warns() -> None:
    ctx = ExecutionContext(config(max_cost_usd=0.0, warn_at=(0.5,)))
    for _ in range(2):
        ctx.record_retry(OSError("flaky"))
    assert [(d, f, u) for d, f, u, _ in soft(ctx)] == [("retries", 0.5, 2)]
    ctx.call_tool(lambda: None)  # free tool calls under a zero cost limit: no cost warning
    assert [d for d, *_ in soft(ctx)] == ["retries"]


def test_a_raising_on_warn_is_logged_and_never_breaks_the_call(caplog: pytest.LogCaptureFixture) -> None:
    def broken(event: ExecutionEvent) -> None:
        raise RuntimeError("pager down")

    ctx = ExecutionContext(config(max_steps=2, warn_at=(0.5,)), on_warn=broken)
    with caplog.at_level(logging.ERROR, logger="veronica_mw"):
        assert ctx.call_tool(lambda: 7) == 7
    assert any("on_warn callback" in r.getMessage() for r in caplog.records)
    assert ctx.call_tool(lambda: 8) == 8
    with pytest.raises(TypeError, match="on_warn"):
        ExecutionContext(config(), on_warn="print")  # type: ignore[arg-type]


def test_observers_see_the_soft_limit_event() -> None:
    kinds: list[str] = []

    class Watch(Observer):
        def event(self, ctx: ExecutionContext, event: ExecutionEvent) -> None:
            kinds.append(event.kind)

    ctx = ExecutionContext(config(max_steps=2, warn_at=(0.5,)), observers=[Watch()])
    ctx.call_tool(lambda: None)
    assert kinds == ["soft_limit"]


def test_nested_calls_warn_in_each_ancestor_at_its_own_fractions() -> None:
    parent_events: list[ExecutionEvent] = []
    parent = ExecutionContext(config(max_steps=4, warn_at=(0.5,)), on_warn=parent_events.append, name="p")
    child = ExecutionContext(config(max_steps=100), parent=parent, name="c")  # no warn_at of its own
    for _ in range(2):
        child.call_llm(lambda: "x", options=WrapOptions(cost_fn=lambda _: 0.3))
    assert [(e.data["context"], e.data["dimension"], e.data["used"]) for e in parent_events] == [
        ("p", "steps", 2),
        ("p", "cost", pytest.approx(0.6)),
    ]
    assert soft(child) == []
    grandchild = child.child("g", max_steps=10)  # child() passes warn_at down: none here
    assert grandchild.config.warn_at == ()


def test_each_fraction_fires_once_under_threads() -> None:
    events: list[ExecutionEvent] = []
    ctx = ExecutionContext(config(max_steps=10_000, warn_at=(0.1, 0.2, 0.3)), on_warn=events.append)
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        for _ in range(1000):
            ctx.wrap_tool_call(lambda: None)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(e.data["fraction"] for e in events) == [0.1, 0.2, 0.3]
    assert all(e.data["used"] >= e.data["fraction"] * 10_000 for e in events)
