"""FunctionAgent / AgentWorkflow: a halt ends the run with ExecutionHalted out of ``await handler``,
never as a tool error fed back to the model, and ``stream_events()`` does not hang."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ToolCallResult
from llama_index.core.tools import FunctionTool
from workflows.events import WorkflowFailedEvent

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters.llamaindex import VeronicaLlamaIndexHandler

from .fakes import Counter, looping_llm, ping_tool

# The workflow runtime lists an agent's methods with inspect.getmembers, touching pydantic's deprecated
# properties (llama-index-workflows 2.x): third-party noise.
pytestmark = [
    pytest.mark.filterwarnings("ignore:The `__fields__` attribute is deprecated"),
    pytest.mark.filterwarnings("ignore:The `__fields_set__` attribute is deprecated"),
    pytest.mark.filterwarnings("ignore:Accessing the 'model_(computed_)?fields' attribute on the instance"),
]
HANG_GUARD_S = 20


def _config(**limits: Any) -> ExecutionConfig:
    return ExecutionConfig(**{"max_cost_usd": 100.0, "max_steps": 100, "max_retries_total": 5, **limits})


async def _run(workflow: Any, **kwargs: Any) -> tuple[ExecutionHalted, list[Any]]:
    """Run to the end, consuming stream_events() under a hang guard; return the halt and the events."""
    events: list[Any] = []
    with anyio.fail_after(HANG_GUARD_S):
        handler = workflow.run("check the service", max_iterations=1000, **kwargs)
        async for event in handler.stream_events():
            events.append(event)
        with pytest.raises(ExecutionHalted) as halted:
            await handler
    return halted.value, events


def _tool_results(events: list[Any]) -> list[ToolCallResult]:
    return [e for e in events if isinstance(e, ToolCallResult)]


# Steps alternate model, tool, model, tool...: max_steps=4 halts at a model call, 5 at a tool call.
@pytest.mark.anyio
@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(("max_steps", "llm_calls", "tool_calls"), [(4, 2, 2), (5, 3, 2)])
async def test_function_agent_looping_on_a_tool_stops_at_max_steps(
    streaming: bool, max_steps: int, llm_calls: int, tool_calls: int
) -> None:
    counter = Counter()
    agent = FunctionAgent(tools=[ping_tool(counter)], llm=looping_llm(counter), streaming=streaming)
    ctx = ExecutionContext(_config(max_steps=max_steps))
    with VeronicaLlamaIndexHandler(ctx):
        halt, events = await _run(agent)
    assert halt.reason == "step_limit"
    assert (counter.llm, counter.tool) == (llm_calls, tool_calls)
    assert ctx.get_snapshot().step_count == max_steps
    kinds = ["llm", "tool"] * (max_steps // 2) + ["llm"] * (max_steps % 2)
    assert [n.kind for n in ctx.graph.nodes()] == kinds
    results = _tool_results(events)
    assert len(results) == tool_calls and not any(r.tool_output.is_error for r in results)
    assert isinstance(events[-1], WorkflowFailedEvent)


@pytest.mark.anyio
async def test_agent_workflow_halts_at_a_tool_step() -> None:
    counter = Counter()
    agent = FunctionAgent(
        name="pinger", description="pings", tools=[ping_tool(counter)], llm=looping_llm(counter)
    )
    workflow = AgentWorkflow(agents=[agent], root_agent="pinger")
    ctx = ExecutionContext(_config(max_steps=7))
    with VeronicaLlamaIndexHandler(ctx):
        halt, events = await _run(workflow)
    assert halt.reason == "step_limit"
    assert (counter.llm, counter.tool) == (4, 3)  # the 4th tool call was refused before it ran
    assert len(_tool_results(events)) == 3


@pytest.mark.anyio
@pytest.mark.parametrize("binding", ["explicit", "current", "config"])
async def test_binding_rule_under_the_workflow_runtime(binding: str) -> None:
    counter = Counter()
    agent = FunctionAgent(tools=[ping_tool(counter)], llm=looping_llm(counter))
    ctx = ExecutionContext(_config(max_steps=3))
    handler = VeronicaLlamaIndexHandler(
        ctx if binding == "explicit" else None, config=_config(max_steps=3) if binding == "config" else None
    )
    with handler:
        if binding == "current":
            with ctx:  # the run's tasks copy the caller's contextvars when it starts
                workflow_handler = agent.run("check the service")
        else:
            workflow_handler = agent.run("check the service")
        with anyio.fail_after(HANG_GUARD_S), pytest.raises(ExecutionHalted):
            await workflow_handler
    counted = handler.owned_context if binding == "config" else ctx
    assert counted is not None and counted.get_snapshot().step_count == 3
    assert (counter.llm, counter.tool) == (2, 1)


@pytest.mark.anyio
async def test_halt_inside_a_tool_ends_the_run_instead_of_reaching_the_model() -> None:
    counter = Counter()
    ctx = ExecutionContext(_config())

    def cancel_job() -> str:
        """Cancel the job."""
        counter.tool += 1
        ctx.cancel("operator stop")
        ctx.check()  # raises ExecutionHalted inside the tool; FunctionAgent would catch it
        return "unreachable"

    tool = FunctionTool.from_defaults(cancel_job)
    agent = FunctionAgent(tools=[tool], llm=looping_llm(counter, "cancel_job"))
    with VeronicaLlamaIndexHandler(ctx):
        halt, events = await _run(agent)
    assert halt.reason == "cancelled"
    assert (counter.llm, counter.tool) == (1, 1)
    assert _tool_results(events) == []  # no error result was produced for the model


@pytest.mark.anyio
async def test_tool_error_draws_a_retry_and_the_spent_budget_stops_the_run() -> None:
    counter = Counter()

    def flaky() -> str:
        """A tool that fails."""
        counter.tool += 1
        raise ConnectionError("service down")

    agent = FunctionAgent(tools=[FunctionTool.from_defaults(flaky)], llm=looping_llm(counter, "flaky"))
    ctx = ExecutionContext(_config(max_retries_total=1))
    with VeronicaLlamaIndexHandler(ctx):
        halt, events = await _run(agent)
    # First error: retry drawn, the error goes back to the model (LlamaIndex's normal behaviour).
    # Second error: retries spent, the context halts, the next model call is refused.
    assert halt.reason == "retry_limit"
    assert (counter.llm, counter.tool) == (2, 2)
    assert [r.tool_output.is_error for r in _tool_results(events)] == [True, True]


@pytest.mark.anyio
async def test_one_handler_shares_its_budget_across_concurrent_agents() -> None:
    counters = [Counter(), Counter()]
    agents = [FunctionAgent(tools=[ping_tool(c)], llm=looping_llm(c)) for c in counters]
    handler = VeronicaLlamaIndexHandler(config=_config(max_steps=9))
    halts: list[str] = []

    async def run(agent: FunctionAgent) -> None:
        halt, _ = await _run(agent)
        halts.append(halt.reason)

    with handler:
        async with anyio.create_task_group() as group:
            for agent in agents:
                group.start_soon(run, agent)
    assert halts == ["step_limit", "step_limit"]
    assert sum(c.llm + c.tool for c in counters) == 9
    assert handler.owned_context is not None and handler.owned_context.get_snapshot().step_count == 9


@pytest.mark.anyio
async def test_tool_calls_outside_agents_are_counted_once() -> None:
    counter = Counter()
    tool = ping_tool(counter)
    llm = looping_llm(counter)  # replies with one call of the ping tool
    ctx = ExecutionContext(_config())
    with VeronicaLlamaIndexHandler(ctx):
        await llm.apredict_and_call([tool], user_msg="ping it")
        tool.call()
        await tool.acall()  # a sync function run through the async path: still one call
    assert (counter.llm, counter.tool) == (1, 3)
    assert [(n.kind, n.name) for n in ctx.graph.nodes()] == [
        ("llm", "MockFunctionCallingLLM.chat"), ("tool", "ping"), ("tool", "ping"), ("tool", "ping")
    ]
