"""``VeronicaRunHooks`` passed to ``Runner.run``/``run_sync``/``run_streamed``: every model and tool
call is a step refused before it runs, and the caller receives the halt itself."""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any

import pytest
from agents import Agent, Runner, UserError, function_tool
from agents.exceptions import AgentsException

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters.openai_agents import AgentsExecutionHalted, VeronicaRunHooks

from .fakes import Counter, ToolLoopModel, looping_agent, ping_tool

MODES = ["run", "run_sync", "streamed"]


def limits(steps: int, cost: float = 100.0, retries: int = 0) -> ExecutionConfig:
    return ExecutionConfig(max_cost_usd=cost, max_steps=steps, max_retries_total=retries)


def run_sync(agent: Agent[Any], **kwargs: Any) -> Any:
    """``Runner.run_sync``, then close the event loop it leaves open for reuse on this thread
    (an unclosed loop is a ResourceWarning, an error in this suite)."""
    try:
        return Runner.run_sync(agent, "check the service", **kwargs)
    finally:
        asyncio.get_event_loop_policy().get_event_loop().close()


def collect_and_run_again() -> None:
    """Collect the objects of runs that died with calls open, then make one hook call (of any
    instance, in any context): that is where the calls they left open are settled."""
    gc.collect()
    assert drive("run", looping_agent(Counter(), finish_after=1), hooks=VeronicaRunHooks()) == "done"


def drive(mode: str, agent: Agent[Any], **kwargs: Any) -> Any:
    """Run ``agent`` to its end the way ``mode`` says; return the final output."""
    kwargs.setdefault("max_turns", 1000)  # the SDK's own turn limit must never be what stops it
    if mode == "run_sync":
        return run_sync(agent, **kwargs).final_output

    async def main() -> Any:
        if mode == "run":
            return (await Runner.run(agent, "check the service", **kwargs)).final_output
        streamed = Runner.run_streamed(agent, "check the service", **kwargs)
        async for _ in streamed.stream_events():
            pass
        return streamed.final_output

    return asyncio.run(main())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("steps", [1, 2, 3, 4, 7])
def test_exactly_max_steps_calls_run_then_the_caller_gets_the_halt(mode: str, steps: int) -> None:
    # Odd limits end on a refused tool call (the SDK would wrap a plain exception from
    # on_tool_start in UserError), even ones on a refused model call.
    counter = Counter()
    ctx = ExecutionContext(limits(steps))
    with pytest.raises(ExecutionHalted) as info:
        drive(mode, looping_agent(counter), hooks=VeronicaRunHooks(ctx))
    halt = info.value
    assert isinstance(halt, AgentsExecutionHalted) and isinstance(halt, AgentsException)
    assert not isinstance(halt, UserError)
    assert halt.reason == "step_limit"
    assert counter.total == steps
    assert counter.model_calls == (steps + 1) // 2 and counter.tool_calls == steps // 2
    snap = ctx.get_snapshot()
    assert (snap.step_count, snap.in_flight, snap.abort_reason) == (steps, 0, "step_limit")
    assert halt.snapshot is not None and halt.snapshot.step_count == steps


@pytest.mark.parametrize("mode", MODES)
def test_a_run_within_its_limits_is_counted_and_priced(mode: str) -> None:
    counter = Counter()
    ctx = ExecutionContext(limits(10))
    agent = looping_agent(counter, finish_after=3)  # model, tool, model, tool, model (final)
    assert drive(mode, agent, hooks=VeronicaRunHooks(ctx)) == "done"
    snap = ctx.get_snapshot()
    assert (counter.model_calls, counter.tool_calls) == (3, 2)
    assert (snap.step_count, snap.in_flight, snap.aborted) == (5, 0, False)
    nodes = ctx.graph.nodes()
    assert [n.kind for n in nodes] == ["llm", "tool", "llm", "tool", "llm"]
    assert [n.name for n in nodes[:2]] == ["openai_agents.llm:looper", "openai_agents.tool:ping"]
    assert all(n.status == "ok" and n.model == "gpt-4o" for n in nodes if n.kind == "llm")
    assert snap.cost_usd_accumulated > 0


def test_the_refused_call_never_runs_and_nothing_after_it(anyio_backend: str) -> None:
    counter = Counter()
    ctx = ExecutionContext(limits(3))
    hooks = VeronicaRunHooks(ctx)
    with pytest.raises(ExecutionHalted):
        drive("run", looping_agent(counter), hooks=hooks)
    # A later run in the halted context is refused at its first model call.
    with pytest.raises(ExecutionHalted):
        drive("run", looping_agent(counter), hooks=hooks)
    assert counter.total == 3


@pytest.mark.parametrize("mode", MODES)
def test_the_cost_ceiling_stops_the_run(mode: str) -> None:
    counter = Counter()
    # gpt-4o prices 1000 in (200 cached) + 500 out at well above $0.001: the first model call's
    # actual cost takes the total past the ceiling, which halts the context, so the tool call it
    # asked for is refused.
    ctx = ExecutionContext(limits(100, cost=0.001))
    with pytest.raises(ExecutionHalted) as info:
        drive(mode, looping_agent(counter), hooks=VeronicaRunHooks(ctx))
    assert info.value.reason == "budget_exceeded"
    assert (counter.model_calls, counter.tool_calls) == (1, 0)
    assert ctx.get_snapshot().cost_usd_accumulated > 0.001


def test_handoffs_count_in_the_same_context() -> None:
    counter = Counter()
    worker = Agent(name="worker", model=ToolLoopModel(counter), tools=[ping_tool(counter)])
    triage = Agent(
        name="triage", model=ToolLoopModel(counter, handoff_to="transfer_to_worker"), handoffs=[worker]
    )
    ctx = ExecutionContext(limits(6))
    with pytest.raises(ExecutionHalted):
        drive("run", triage, hooks=VeronicaRunHooks(ctx))
    assert counter.total == 6  # triage's model call, then worker: model, tool, model, tool, model
    assert counter.model_calls == 4
    assert [n.name for n in ctx.graph.nodes()][:2] == ["openai_agents.llm:triage", "openai_agents.llm:worker"]
    handoffs = [e for e in ctx.get_events() if e.kind == "handoff"]
    assert [e.detail for e in handoffs] == ["triage -> worker"]


def test_owned_context_from_config_and_reset() -> None:
    counter = Counter()
    hooks = VeronicaRunHooks(config=limits(2))
    assert hooks.owned_context is None
    with pytest.raises(ExecutionHalted):
        drive("run", looping_agent(counter), hooks=hooks)
    first = hooks.owned_context
    assert first is not None and first.get_snapshot().step_count == 2
    hooks.reset()
    with pytest.raises(ExecutionHalted):
        drive("run_sync", looping_agent(counter), hooks=hooks)
    assert hooks.owned_context is not first and counter.total == 4


def test_without_any_context_the_run_is_uncontained() -> None:
    counter = Counter()
    hooks = VeronicaRunHooks()
    assert hooks.context is None
    assert drive("run", looping_agent(counter, finish_after=4), hooks=hooks) == "done"
    assert counter.total == 7


def test_the_current_context_binds_hooks_made_without_one() -> None:
    counter = Counter()
    with ExecutionContext(limits(3)) as ctx:
        with pytest.raises(ExecutionHalted):
            drive("run_sync", looping_agent(counter), hooks=VeronicaRunHooks())
    assert counter.total == ctx.get_snapshot().step_count == 3


def test_bad_arguments_are_refused_at_construction() -> None:
    with pytest.raises(TypeError):
        VeronicaRunHooks(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        VeronicaRunHooks(cost_estimate_hint=-1.0)


def test_concurrent_runs_share_one_budget_exactly() -> None:
    counters = [Counter() for _ in range(8)]
    ctx = ExecutionContext(limits(25))
    hooks = VeronicaRunHooks(ctx)

    async def main() -> list[Any]:
        runs = [Runner.run(looping_agent(c), "go", hooks=hooks, max_turns=1000) for c in counters]
        return await asyncio.gather(*runs, return_exceptions=True)

    outcomes = asyncio.run(main())
    assert all(isinstance(o, AgentsExecutionHalted) for o in outcomes)
    assert sum(c.total for c in counters) == 25 == ctx.get_snapshot().step_count


def test_threads_running_run_sync_share_one_budget_exactly() -> None:
    counters = [Counter() for _ in range(6)]
    ctx = ExecutionContext(limits(20))
    hooks = VeronicaRunHooks(ctx)
    errors: list[BaseException] = []

    def work(counter: Counter) -> None:
        try:
            run_sync(looping_agent(counter), hooks=hooks, max_turns=1000)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(c,)) for c in counters]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)  # hang guard only
    assert len(errors) == 6 and all(isinstance(e, AgentsExecutionHalted) for e in errors)
    assert sum(c.total for c in counters) == 20 == ctx.get_snapshot().step_count


def test_parallel_tool_calls_never_run_uncounted() -> None:
    counter = Counter()
    ctx = ExecutionContext(limits(3))
    with pytest.raises(ExecutionHalted):
        drive("run", looping_agent(counter, parallel=4), hooks=VeronicaRunHooks(ctx))
    collect_and_run_again()
    snap = ctx.get_snapshot()
    assert snap.step_count == 3 and snap.in_flight == 0
    assert counter.model_calls == 1 and counter.tool_calls <= 2


def test_a_failed_model_call_is_settled_after_its_run_is_gone() -> None:
    counter = Counter()
    ctx = ExecutionContext(limits(10, retries=3))
    with pytest.raises(ConnectionError):
        drive("run", looping_agent(counter, fail_on=2), hooks=VeronicaRunHooks(ctx))
    collect_and_run_again()
    snap = ctx.get_snapshot()
    assert (snap.step_count, snap.in_flight, counter.total) == (3, 0, 3)


def test_cost_hints_stop_concurrent_model_calls_from_jointly_overshooting() -> None:
    # Five runs start at once; every model call waits at the gate, so all are in flight together.
    # Each reserves its $0.3 hint before it runs: three fit under $1, the fourth is refused.
    counters = [Counter() for _ in range(5)]
    ctx = ExecutionContext(limits(100, cost=1.0))
    hooks = VeronicaRunHooks(ctx, cost_estimate_hint=0.3)

    async def main() -> list[Any]:
        gate = asyncio.Event()
        runs = [
            asyncio.ensure_future(
                Runner.run(looping_agent(c, gate=gate, usage=(10, 10, 0)), "go", hooks=hooks)
            )
            for c in counters
        ]
        while not ctx.aborted:  # the refusal comes while the admitted three are blocked
            await asyncio.sleep(0.001)
        assert ctx.get_snapshot().in_flight == 3
        gate.set()
        return await asyncio.gather(*runs, return_exceptions=True)

    outcomes = asyncio.run(main())
    assert all(isinstance(o, AgentsExecutionHalted) and o.reason == "budget_exceeded" for o in outcomes)
    assert sum(c.model_calls for c in counters) == 3
    assert sum(c.tool_calls for c in counters) == 0  # the context halted: their tool calls are refused
    snap = ctx.get_snapshot()
    assert snap.in_flight == 0 and snap.cost_usd_accumulated < 0.01  # actual usage replaced the hints


def test_a_halt_inside_a_tool_body_is_not_swallowed() -> None:
    # The SDK turns an exception in a tool body into an error message for the model; a halt of
    # a call made inside the tool still ends the run, at the next model call.
    counter = Counter()
    ctx = ExecutionContext(limits(2))
    nested: list[str] = []

    @function_tool
    def ping() -> str:
        """Check that the service answers."""
        counter.tool_calls += 1

        def nested_call() -> str:
            nested.append("ran")
            return "pong"

        return ctx.call_llm(nested_call)  # the third step: refused

    agent = Agent(name="looper", model=ToolLoopModel(counter), tools=[ping])
    with pytest.raises(AgentsExecutionHalted) as info:
        drive("run", agent, hooks=VeronicaRunHooks(ctx))
    assert info.value.reason == "step_limit"
    assert (counter.model_calls, counter.tool_calls, nested) == (1, 1, [])
