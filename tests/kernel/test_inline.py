"""The inline call path of a plain context (no node object per call) and the lazily scheduled
deadline: differential tests against the ordinary path (the same context made non-plain by an
observer that does nothing), ring eviction while a call runs, and the deadline that is enforced
by every call and state read and fired by the pool only for someone waiting."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veronica_mw import (
    Decision,
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    Observer,
    SharedTimeoutPool,
    WrapOptions,
)
from veronica_mw.kernel import observer as observer_module

USAGE = {"usage_metadata": {"input_tokens": 1000, "output_tokens": 100}, "model": "gpt-4o-mini"}


@pytest.fixture(autouse=True)
def no_global_observers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without global observers (``import veronica_mw`` registers OpenTelemetry's stand-in where
    opentelemetry is installed): a plain context runs its calls inline only then."""
    monkeypatch.setattr(observer_module, "_global", ())


class Boom(Exception):
    pass


def _result(kind: str) -> Any:
    if kind == "none":
        return None
    if kind == "text":
        return "answer"
    if kind == "usage":
        return dict(USAGE)
    if kind == "dict":
        return {"rows": 3}
    raise Boom("provider down")


_call = st.tuples(
    st.sampled_from(["wrap_llm", "wrap_tool", "call_llm", "call_tool", "nested", "awrap_llm", "acall_tool"]),
    st.sampled_from(["none", "text", "usage", "dict", "raise"]),
    st.sampled_from([0.0, 0.01, 0.25]),  # hint
    st.sampled_from([None, 0.02]),  # cost_fn's answer
    st.sampled_from(["", "search"]),  # operation name
    st.sampled_from([None, "gpt-4o-mini"]),  # the model the call is made with
)


Call = tuple[str, str, float, float | None, str, str | None]


def _run(ctx: ExecutionContext, calls: list[Call]) -> list[Any]:
    loop = asyncio.new_event_loop()
    try:
        return _run_on(ctx, calls, loop)
    finally:
        loop.close()


def _run_on(ctx: ExecutionContext, calls: list[Call], loop: asyncio.AbstractEventLoop) -> list[Any]:
    outcomes: list[Any] = []
    for form, result, hint, cost, name, model in calls:
        cost_fn: Any = None if cost is None else (lambda r, c=cost: c)
        options = WrapOptions(operation_name=name, cost_estimate_hint=hint, cost_fn=cost_fn, model=model)

        def body(result: str = result) -> Any:
            return _result(result)

        def nested(result: str = result, options: WrapOptions = options) -> Any:
            ctx.wrap_tool_call(lambda: "inner", options=options)
            return _result(result)

        try:
            if form == "wrap_llm":
                outcomes.append(ctx.wrap_llm_call(body, options))
            elif form == "wrap_tool":
                outcomes.append(ctx.wrap_tool_call(body, options))
            elif form == "call_llm":
                outcomes.append(ctx.call_llm(body, options=options))
            elif form == "call_tool":
                outcomes.append(ctx.call_tool(body, options=options))
            elif form == "awrap_llm":
                outcomes.append(loop.run_until_complete(ctx.awrap_llm_call(body, options)))
            elif form == "acall_tool":

                async def abody(body: Any = body) -> Any:
                    return body()

                outcomes.append(loop.run_until_complete(ctx.acall_tool(abody, options=options)))
            else:
                outcomes.append(ctx.wrap_llm_call(nested, options))
        except ExecutionHalted as exc:
            outcomes.append(("halted", exc.reason))
        except Boom:
            outcomes.append("boom")
    return outcomes


def _state(ctx: ExecutionContext) -> Any:
    snap = ctx.get_snapshot()
    nodes = [
        (n.node_id, n.kind, n.name, n.parent_id, n.status, round(n.cost_usd, 9), n.tokens_in, n.tokens_out,
         n.step, n.model, n.reserved_usd, n.settled, n.ended >= n.started > 0)
        for n in ctx.graph.nodes()
    ]  # fmt: skip
    aggregates = {
        k: (a.count, round(a.cost_usd, 9), a.tokens_in, a.tokens_out)
        for k, a in ctx.graph.aggregates().items()
    }
    return (
        snap.step_count,
        round(snap.cost_usd_accumulated, 9),
        round(snap.cost_usd_reserved, 9),
        snap.retries_used,
        snap.in_flight,
        snap.aborted,
        snap.abort_reason,
        snap.abort_detail,
        [e.kind for e in snap.events],
        nodes,
        aggregates,
        ctx.graph.total_nodes,
        ctx.get_partial_result(),
    )


@settings(max_examples=150, deadline=None)
@given(
    calls=st.lists(_call, max_size=30),
    max_steps=st.integers(0, 25),
    max_cost=st.sampled_from([0.0, 0.05, 0.5, 100.0]),
    capacity=st.sampled_from([3, 10_000]),
    divergence=st.sampled_from([0, 4]),
)
def test_inline_path_is_the_ordinary_path(
    calls: list[Any], max_steps: int, max_cost: float, capacity: int, divergence: int
) -> None:
    config = ExecutionConfig(max_cost_usd=max_cost, max_steps=max_steps, max_retries_total=3)

    def make(observers: tuple[Observer, ...]) -> ExecutionContext:
        return ExecutionContext(
            config, graph_capacity=capacity, divergence_threshold=divergence, observers=observers
        )

    plain, ordinary = make(()), make((Observer(),))
    assert plain._plain and not ordinary._plain
    assert _run(plain, calls) == _run(ordinary, calls)
    assert _state(plain) == _state(ordinary)


def test_a_call_whose_record_left_the_ring_while_it_ran() -> None:
    ctx = ExecutionContext(ExecutionConfig(10.0, 100, 0), graph_capacity=4, divergence_threshold=0)

    def many() -> None:
        for _ in range(6):
            assert ctx.wrap_tool_call(lambda: None) is Decision.ALLOW

    def outer() -> None:
        many()
        _result("raise")

    with pytest.raises(Boom):
        ctx.call_llm(outer)
    nodes = ctx.graph.nodes()
    assert [n.parent_id for n in nodes] == [1, 1, 1, 1]  # the outer call was node 1
    assert ctx.graph.total_nodes == 7 and ctx.get_snapshot().in_flight == 0
    assert ctx.graph.aggregates()[("llm", "error")].count == 1
    assert ctx.get_snapshot().retries_used == 0 and ctx.aborted  # no retry left: retry_limit
    assert ctx.abort_reason == "retry_limit"


def test_records_are_rebuilt_as_nodes_and_memory_stays_flat() -> None:
    ctx = ExecutionContext(ExecutionConfig(1e9, 10**9, 0), graph_capacity=100, divergence_threshold=0)
    for i in range(250):
        ctx.call_tool(lambda: None, options=WrapOptions(operation_name=f"t{i % 2}"))
    nodes = ctx.graph.nodes()
    assert [n.node_id for n in nodes] == list(range(151, 251))
    assert {n.status for n in nodes} == {"ok"} and [n.step for n in nodes] == list(range(151, 251))
    assert all(n.duration_ms >= 0 for n in nodes)


# -- the deadline ---------------------------------------------------------------------------------------


def timers() -> int:
    return len(SharedTimeoutPool.default())


def test_a_deadline_nobody_waits_for_is_enforced_without_a_timer() -> None:
    before = timers()
    ctx = ExecutionContext(ExecutionConfig(1.0, 10, 0, timeout_ms=20))
    with ctx:
        assert timers() == before  # no token holder, no observer: nothing to fire
        assert ctx.wrap_llm_call(lambda: "ok") is Decision.ALLOW
        deadline = time.monotonic() + 30  # hang guard: waits for the deadline, asserts no timing
        while not ctx.aborted and time.monotonic() < deadline:
            time.sleep(0.005)
        assert ctx.aborted and ctx.abort_reason == "timeout"
        assert ctx.wrap_llm_call(lambda: "never") is Decision.HALT
    assert ctx.get_snapshot().step_count == 1


def test_a_token_holder_gets_the_deadline_fired() -> None:
    before = timers()
    fired: list[str] = []
    ctx = ExecutionContext(ExecutionConfig(1.0, 10, 0, timeout_ms=30))
    with ctx:
        ctx.cancellation_token.add_callback(lambda: fired.append("halted"))
        assert timers() == before + 1
        deadline = time.monotonic() + 30  # hang guard
        while not fired and time.monotonic() < deadline:
            time.sleep(0.005)
    assert fired == ["halted"] and ctx._reason == "timeout"
    assert timers() == before


def test_a_token_made_while_another_thread_arms_still_gets_the_deadline_fired(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # arm() takes no lock when nothing waits for the deadline. Simulate the other thread asking
    # for the token inside that window (after arm saw no token, before it marked itself armed):
    # the token sees an unarmed context and schedules nothing, so arm must see the token after.
    from veronica_mw.kernel import _lifecycle

    ctx = ExecutionContext(ExecutionConfig(1.0, 10, 0, timeout_ms=30))
    fired: list[str] = []
    real = _lifecycle._monotonic

    def clock_with_a_token_made_meanwhile() -> float:
        ctx.cancellation_token.add_callback(lambda: fired.append("halted"))
        return real()

    monkeypatch.setattr(_lifecycle, "_monotonic", clock_with_a_token_made_meanwhile)
    before = timers()
    ctx.arm()
    monkeypatch.setattr(_lifecycle, "_monotonic", real)
    assert timers() == before + 1
    deadline = time.monotonic() + 30  # hang guard
    while not fired and time.monotonic() < deadline:
        time.sleep(0.005)
    assert fired == ["halted"] and ctx._reason == "timeout"
    ctx.disarm()


def test_threads_arming_at_once_while_a_token_is_made_schedule_one_timer() -> None:
    import threading

    def race(ctx: ExecutionContext) -> None:
        gate = threading.Barrier(9)

        def arm() -> None:
            gate.wait()
            ctx.arm()

        def token() -> None:
            gate.wait()
            assert ctx.cancellation_token is not None

        threads = [threading.Thread(target=arm) for _ in range(8)] + [threading.Thread(target=token)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    for _ in range(50):
        ctx = ExecutionContext(ExecutionConfig(1.0, 10, 0, timeout_ms=60_000))
        before = timers()
        race(ctx)
        assert timers() == before + 1  # the holder's deadline, scheduled once
        ctx.disarm()
        assert timers() == before


def test_a_token_asked_for_after_the_context_ended_schedules_nothing() -> None:
    before = timers()
    ctx = ExecutionContext(ExecutionConfig(1.0, 10, 0, timeout_ms=60_000))
    with ctx:
        pass
    assert ctx.cancellation_token is not None
    assert timers() == before  # nothing left in the pool for a context that is over


def test_an_observer_gets_the_deadline_fired() -> None:
    halted: list[str] = []

    class Watch(Observer):
        def halted(self, ctx: ExecutionContext, reason: str, detail: str) -> None:
            halted.append(reason)

    with ExecutionContext(ExecutionConfig(1.0, 10, 0, timeout_ms=30), observers=[Watch()]):
        deadline = time.monotonic() + 30
        while not halted and time.monotonic() < deadline:
            time.sleep(0.005)
    assert halted == ["timeout"]


def test_a_layer_below_adopts_the_running_inline_call_and_settles_it_once() -> None:
    # What a provider SDK's instrumentation does under ctx.call_llm: find the enclosing step by
    # the current node id and settle it itself, with the usage it saw.
    from veronica_mw.kernel.context import current_node

    ctx = ExecutionContext(ExecutionConfig(10.0, 10, 0))

    def provider_call() -> str:
        node = ctx.graph.get(current_node.get())  # type: ignore[arg-type]
        assert node is not None and node.context is ctx and node.status == "running"
        assert ctx.graph.get(node.node_id) is node  # the same object while it runs
        node.commit(cost_usd=0.25)
        return "answer"

    assert ctx.call_llm(provider_call) == "answer"
    snap = ctx.get_snapshot()
    assert (snap.step_count, snap.cost_usd_accumulated, snap.in_flight) == (1, 0.25, 0)
    assert [(n.status, n.cost_usd) for n in ctx.graph.nodes()] == [("ok", 0.25)]
    assert ctx.graph.aggregates()[("llm", "ok")].count == 1


def test_settled_records_keep_the_options_observers_read() -> None:
    ctx = ExecutionContext(ExecutionConfig(10.0, 10, 0))
    named = WrapOptions(operation_name="search", gen_ai_operation="embeddings")
    ctx.call_tool(lambda: "rows", options=named)
    node = ctx.begin_call("llm", WrapOptions(gen_ai_operation="chat"))
    node.commit()
    assert [n.options.gen_ai_operation for n in ctx.graph.nodes()] == ["embeddings", "chat"]
