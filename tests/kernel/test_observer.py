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


class Nodes(Observer):
    """Keeps what observers may read of each node, at start and at end."""

    def __init__(self) -> None:
        self.started: list[tuple[str, int, bool, str | None]] = []
        self.ended: list[tuple[str, str, str | None, str]] = []

    def call_started(self, ctx: ExecutionContext, node: CallNode) -> None:
        self.started.append((node.name, node.step, node.inline, node.options.gen_ai_operation or None))

    def call_ended(self, ctx: ExecutionContext, node: CallNode, error: BaseException | None) -> None:
        self.ended.append((node.name, node.status, node.response_model, type(error).__name__))


def test_nodes_carry_step_inline_options_and_the_reported_model() -> None:
    rec = Nodes()
    priced = {"usage": {"input_tokens": 10, "output_tokens": 5}, "model": "gpt-4o-mini"}
    with ExecutionContext(
        ExecutionConfig(max_cost_usd=1, max_steps=9, max_retries_total=0), observers=[rec]
    ) as ctx:
        ctx.call_llm(lambda: priced, options=WrapOptions(operation_name="a", model="gpt-4o-mini"))
        ctx.call_llm(lambda: "no usage", options=WrapOptions(operation_name="b", model="gpt-4o"))
        node = ctx.begin_call("llm", WrapOptions(operation_name="c", gen_ai_operation="embeddings"))
        node.release()  # a released step is given back: the next call is step 3 again
        node = ctx.begin_call("llm", WrapOptions(operation_name="d"))
        node.commit(cost_usd=0.001, model="gpt-4o-2024-08-06")
    assert rec.started == [
        ("a", 1, True, None),
        ("b", 2, True, None),
        ("c", 3, False, "embeddings"),
        ("d", 3, False, None),
    ]
    assert rec.ended == [
        ("a", "ok", "gpt-4o-mini", "NoneType"),  # named by the result
        ("b", "ok", None, "NoneType"),  # the request's model, but nothing reported one
        ("c", "released", None, "NoneType"),
        ("d", "ok", "gpt-4o-2024-08-06", "NoneType"),
    ]


def test_an_interrupted_call_reports_what_interrupted_it() -> None:
    rec = Nodes()

    def stop() -> None:
        raise KeyboardInterrupt

    ctx = ExecutionContext(LIMITS, observers=[rec])
    with pytest.raises(KeyboardInterrupt):
        ctx.call_tool(stop, options=WrapOptions(operation_name="t"))
    assert rec.ended == [("t", "interrupted", None, "KeyboardInterrupt")]


def test_describing_options_are_validated() -> None:
    with pytest.raises(TypeError, match="gen_ai_operation"):
        WrapOptions(gen_ai_operation=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="session_message"):
        WrapOptions(session_message="yes")  # type: ignore[arg-type]
    assert WrapOptions().session_message is False and WrapOptions().gen_ai_operation == ""
