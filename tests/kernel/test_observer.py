"""Observers see every admitted call, settlement, event and halt, in order, and never break a call."""

from __future__ import annotations

import pytest

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, Observer, WrapOptions
from veronica_mw.kernel.graph import CallNode
from veronica_mw.kernel.observer import add_observer, remove_observer
from veronica_mw.kernel.snapshot import ExecutionEvent

LIMITS = ExecutionConfig(max_cost_usd=1, max_steps=2, max_retries_total=0)


class Recorder(Observer):
    def __init__(self) -> None:
        self.seen: list[tuple[str, ...]] = []

    def context_started(self, ctx: ExecutionContext) -> None:
        self.seen.append(("started", ctx.chain_id))

    def call_started(self, ctx: ExecutionContext, node: CallNode) -> None:
        self.seen.append(("call", node.kind, node.name, node.status))

    def call_ended(self, ctx: ExecutionContext, node: CallNode, error: BaseException | None) -> None:
        self.seen.append(("end", node.name, node.status, type(error).__name__ if error else ""))

    def event(self, ctx: ExecutionContext, event: ExecutionEvent) -> None:
        self.seen.append(("event", event.kind))

    def halted(self, ctx: ExecutionContext, reason: str, detail: str) -> None:
        self.seen.append(("halted", reason))

    def context_ended(self, ctx: ExecutionContext) -> None:
        self.seen.append(("ended", str(ctx.get_snapshot().step_count)))


def boom() -> None:
    raise ValueError("no")


def test_a_run_is_reported_in_order() -> None:
    rec = Recorder()
    config = ExecutionConfig(max_cost_usd=1.0, max_steps=3, max_retries_total=5)
    with ExecutionContext(config, observers=[rec]) as ctx:
        ctx.call_llm(lambda: "hi", options=WrapOptions(operation_name="chat", model="nope-unknown"))
        with pytest.raises(ValueError):
            ctx.call_tool(boom, options=WrapOptions(operation_name="search"))
        ctx.call_tool(lambda: 1, options=WrapOptions(operation_name="calc"))
        with pytest.raises(ExecutionHalted):
            ctx.call_tool(lambda: 1, options=WrapOptions(operation_name="never"))
    assert rec.seen == [
        ("started", ctx.chain_id),
        ("call", "llm", "chat", "running"),
        ("end", "chat", "ok", ""),
        ("call", "tool", "search", "running"),
        ("end", "search", "error", "ValueError"),
        ("call", "tool", "calc", "running"),
        ("end", "calc", "ok", ""),
        ("halted", "step_limit"),
        ("ended", "3"),
    ]


def test_a_raising_observer_never_breaks_a_call(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Observer):
        def call_started(self, ctx: ExecutionContext, node: CallNode) -> None:
            raise RuntimeError("observer bug")

    with ExecutionContext(
        ExecutionConfig(max_cost_usd=1, max_steps=2, max_retries_total=0), observers=[Broken()]
    ) as ctx:
        assert ctx.call_tool(lambda: 7) == 7
    assert ctx.get_snapshot().step_count == 1
    assert any("observer" in r.getMessage() for r in caplog.records)


def test_global_observers_see_every_context_until_removed() -> None:
    rec = Recorder()
    add_observer(rec)
    add_observer(rec)  # idempotent
    try:
        with ExecutionContext(ExecutionConfig(max_cost_usd=1, max_steps=2, max_retries_total=0)) as ctx:
            ctx.call_tool(lambda: 1, options=WrapOptions(operation_name="t"))
    finally:
        remove_observer(rec)
    with ExecutionContext(ExecutionConfig(max_cost_usd=1, max_steps=2, max_retries_total=0)) as other:
        other.call_tool(lambda: 1)
    assert [s[0] for s in rec.seen] == ["started", "call", "end", "ended"]


def test_observers_must_be_observer_instances() -> None:
    with pytest.raises(TypeError, match="Observer"):
        ExecutionContext(LIMITS, observers=[object()])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        add_observer(object())  # type: ignore[arg-type]
