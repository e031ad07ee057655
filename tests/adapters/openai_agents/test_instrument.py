"""``veronica_mw.instrument("openai-agents")``: runs inside a current context are contained without
a hooks argument; outside any context, and after ``uninstrument()``, nothing changes."""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent, ModelBehaviorError, RunConfig, RunContextWrapper, RunHooks, Tool
from agents.run import AgentRunner

import veronica_mw
from veronica_mw import ExecutionContext, ExecutionHalted
from veronica_mw.adapters import openai_agents
from veronica_mw.adapters.openai_agents import AgentsExecutionHalted, ChainedRunHooks, VeronicaRunHooks

from .fakes import Counter, ToolLoopModel, looping_agent, ping_tool
from .test_hooks import MODES, drive, limits


@pytest.fixture
def instrumented() -> Any:
    assert "openai-agents" in veronica_mw.instrument("openai-agents")
    yield
    veronica_mw.uninstrument()


@pytest.mark.usefixtures("instrumented")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("steps", [1, 4, 5])
def test_runs_in_a_current_context_are_contained_without_hooks(mode: str, steps: int) -> None:
    counter = Counter()
    with ExecutionContext(limits(steps)) as ctx:
        with pytest.raises(ExecutionHalted) as info:
            drive(mode, looping_agent(counter))
    assert isinstance(info.value, AgentsExecutionHalted) and info.value.reason == "step_limit"
    assert counter.total == steps == ctx.get_snapshot().step_count


@pytest.mark.usefixtures("instrumented")
def test_outside_any_context_a_run_passes_through() -> None:
    counter = Counter()
    assert drive("run", looping_agent(counter, finish_after=3)) == "done"
    assert counter.total == 5


class Recorder(RunHooks[Any]):
    def __init__(self) -> None:
        self.seen: list[str] = []

    async def on_llm_start(self, context: RunContextWrapper[Any], agent: Agent[Any], *args: Any) -> None:
        self.seen.append("llm")

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool) -> None:
        self.seen.append("tool")

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: object
    ) -> None:
        self.seen.append("tool_end")


@pytest.mark.usefixtures("instrumented")
@pytest.mark.parametrize("mode", MODES)
def test_the_callers_hooks_still_run_after_ours(mode: str) -> None:
    counter = Counter()
    recorder = Recorder()
    with ExecutionContext(limits(3)):
        with pytest.raises(ExecutionHalted):
            drive(mode, looping_agent(counter), hooks=recorder)
    # The refused tool call (the 4th) never reached the caller's hooks.
    assert recorder.seen == ["llm", "tool", "tool_end", "llm"]
    assert counter.total == 3


@pytest.mark.usefixtures("instrumented")
def test_explicit_hooks_are_not_doubled() -> None:
    counter = Counter()
    ctx = ExecutionContext(limits(4))
    with ExecutionContext(limits(100)) as current:
        with pytest.raises(ExecutionHalted):
            drive("run", looping_agent(counter), hooks=VeronicaRunHooks(ctx))
    assert counter.total == 4 == ctx.get_snapshot().step_count
    assert current.get_snapshot().step_count == 0  # the explicit context, not the current one


class Wrapping(RunHooks[Any]):
    """A caller's own composite that forwards to a VeronicaRunHooks inside it."""

    def __init__(self, inner: VeronicaRunHooks) -> None:
        self.inner = inner

    async def on_llm_start(self, *args: Any) -> None:
        await self.inner.on_llm_start(*args)

    async def on_llm_end(self, *args: Any) -> None:
        await self.inner.on_llm_end(*args)

    async def on_tool_start(self, *args: Any) -> None:
        await self.inner.on_tool_start(*args)

    async def on_tool_end(self, *args: Any) -> None:
        await self.inner.on_tool_end(*args)


@pytest.mark.usefixtures("instrumented")
@pytest.mark.parametrize("mode", MODES)
def test_our_hooks_hidden_in_the_callers_count_each_call_once(mode: str) -> None:
    counter = Counter()
    with ExecutionContext(limits(5)) as ctx:
        with pytest.raises(ExecutionHalted):
            drive(mode, looping_agent(counter), hooks=Wrapping(VeronicaRunHooks()))
    assert counter.total == 5 == ctx.get_snapshot().step_count


@pytest.mark.usefixtures("instrumented")
def test_agents_used_as_tools_count_in_the_same_context() -> None:
    counter = Counter()
    inner = looping_agent(counter, name="researcher")
    outer = Agent(
        name="lead",
        model=ToolLoopModel(counter, tool="research", arguments='{"input": "containment"}'),
        tools=[inner.as_tool(tool_name="research", tool_description="Research something.", max_turns=1000)],
    )
    with ExecutionContext(limits(6)) as ctx:
        with pytest.raises(ExecutionHalted):
            drive("run", outer)
    # lead's model, the research tool call, then inside it: model, ping, model, ping; the next
    # model call is refused inside the nested run, and its halt ends the lead's run as well.
    assert (counter.model_calls, counter.tool_calls) == (3, 2)
    assert ctx.get_snapshot().step_count == 6
    names = [n.name for n in ctx.graph.nodes()]
    assert names[:3] == [
        "openai_agents.llm:lead",
        "openai_agents.tool:research",
        "openai_agents.llm:researcher",
    ]


@pytest.mark.usefixtures("instrumented")
def test_the_model_a_run_config_forces_is_the_one_priced() -> None:
    counter = Counter()
    model = ToolLoopModel(counter, model="gpt-4o-mini", finish_after=1)
    agent = Agent(name="a", model="gpt-4o")
    with ExecutionContext(limits(10)) as ctx:
        drive("run", agent, run_config=RunConfig(model=model))
    (node,) = ctx.graph.nodes()
    assert node.model == "gpt-4o-mini"


@pytest.mark.usefixtures("instrumented")
@pytest.mark.parametrize("mode", MODES)
def test_a_failed_model_call_is_recorded_and_draws_a_retry(mode: str) -> None:
    counter = Counter()
    with ExecutionContext(limits(10, retries=2)) as ctx:
        with pytest.raises(ConnectionError):
            drive(mode, looping_agent(counter, fail_on=2))
    snap = ctx.get_snapshot()
    assert (snap.step_count, snap.in_flight, snap.retries_used) == (3, 0, 1)
    assert [n.status for n in ctx.graph.nodes()] == ["ok", "ok", "error"]


def test_uninstrument_restores_the_runner_and_both_are_idempotent() -> None:
    originals = {name: AgentRunner.__dict__[name] for name in ("run", "run_sync", "run_streamed")}
    openai_agents.instrument()
    openai_agents.instrument()
    assert all(AgentRunner.__dict__[name] is not fn for name, fn in originals.items())
    openai_agents.uninstrument()
    openai_agents.uninstrument()
    assert {name: AgentRunner.__dict__[name] for name in originals} == originals
    counter = Counter()
    with ExecutionContext(limits(1)):
        assert drive("run", looping_agent(counter, finish_after=3)) == "done"  # uncontained now
    assert counter.total == 5


def test_the_default_set_includes_the_agents_sdk() -> None:
    assert "openai-agents" in veronica_mw.instrument()
    assert openai_agents.instrumented()
    veronica_mw.uninstrument()
    assert not openai_agents.instrumented()


def test_chained_hooks_forward_every_hook_the_sdk_defines() -> None:
    from agents.lifecycle import RunHooksBase

    names = {n for n in dir(RunHooksBase) if n.startswith("on_")}
    assert names >= {"on_llm_start", "on_llm_end", "on_tool_start", "on_tool_end", "on_handoff"}
    assert all(n in vars(ChainedRunHooks) for n in names)


@pytest.mark.usefixtures("instrumented")
@pytest.mark.parametrize("mode", MODES)
def test_a_response_the_sdk_rejects_is_still_paid_for(mode: str) -> None:
    # The model asks for a tool the agent does not have: the SDK raises ModelBehaviorError after
    # the call returned. The call ran and was billed, so its usage is committed, not dropped.
    counter = Counter()
    agent = Agent(name="a", model=ToolLoopModel(counter, tool="no_such_tool"), tools=[ping_tool(counter)])
    with ExecutionContext(limits(10)) as ctx:
        with pytest.raises(ModelBehaviorError):
            drive(mode, agent)
    (node,) = ctx.graph.nodes()
    assert (node.status, node.tokens_in, node.tokens_out) == ("ok", 1000, 500)
    assert node.cost_usd > 0 and ctx.get_snapshot().in_flight == 0
