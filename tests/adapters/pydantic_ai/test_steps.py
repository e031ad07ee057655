"""Model requests and tool executions are steps, refused before they run, in every way to run an agent.

A ``Runaway`` model asks for a tool on every turn, so without a limit the agent would loop for
ever. With ``max_steps=N`` exactly N model requests plus tool executions really run (counted in
the model function and the tool body), then the run call raises the kernel's ExecutionHalted
itself: not wrapped, and never shown to the model as a retry prompt.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext, capture_run_messages
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import UsageLimits

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, HaltReason
from veronica_mw.adapters.pydantic_ai import VeronicaCapability

from .conftest import close_run_sync_loop
from .fakes import FORMS, Answering, Runaway, run_form


def limits(steps: int, retries: int = 3) -> ExecutionConfig:
    return ExecutionConfig(max_cost_usd=100.0, max_steps=steps, max_retries_total=retries)


def assert_plain_halt(exc: BaseException, reason: HaltReason) -> None:
    assert type(exc) is ExecutionHalted  # the kernel's own exception, not a framework wrapper
    assert exc.reason == reason


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("steps", [1, 2, 5, 8])
def test_exactly_max_steps_executions_then_halt(form: str, steps: int) -> None:
    fake = Runaway()
    capability = VeronicaCapability(config=limits(steps))
    agent = fake.agent([capability])
    with pytest.raises(ExecutionHalted) as caught:
        run_form(agent, form)
    assert_plain_halt(caught.value, HaltReason.STEP_LIMIT)
    assert fake.executions == steps
    # model, tool, model, tool, ...: the step after the last one allowed was refused before it ran
    assert (fake.model_calls, fake.tool_calls) == ((steps + 1) // 2, steps // 2)
    ctx = capability.owned_context
    assert ctx is not None
    assert ctx.get_snapshot().step_count == steps
    kinds = [(node.kind, node.status) for node in ctx.graph.nodes()]
    assert kinds == [("llm" if i % 2 == 0 else "tool", "ok") for i in range(steps)]


@pytest.mark.parametrize("form", FORMS)
def test_the_halt_is_never_fed_back_to_the_model(form: str) -> None:
    fake = Runaway()
    agent = fake.agent([VeronicaCapability(config=limits(4))])
    with capture_run_messages() as messages, pytest.raises(ExecutionHalted):
        run_form(agent, form)
    # the tool refused at step 5 never ran and no retry prompt carried the halt to the model
    assert fake.executions == 4
    for history in [*fake.seen, messages]:
        assert "execution halted" not in repr(history)
    requests = [m for m in messages if isinstance(m, ModelRequest)]
    assert all("retry" not in type(part).__name__.lower() for m in requests for part in m.parts)


def test_a_refused_tool_never_runs() -> None:
    fake = Runaway()
    agent = fake.agent([VeronicaCapability(config=limits(3))])
    with pytest.raises(ExecutionHalted):
        agent.run_sync("weather?")
    assert (fake.model_calls, fake.tool_calls) == (2, 1)  # step 4 was the second tool: refused


def test_parallel_tool_calls_are_one_step_each() -> None:
    fake = Runaway(tools_per_turn=2)
    agent = fake.agent([VeronicaCapability(config=limits(6))])
    with pytest.raises(ExecutionHalted):
        agent.run_sync("weather?")
    # model + 2 tools, model + 2 tools; the third model request is refused
    assert (fake.model_calls, fake.tool_calls) == (2, 4)


def test_a_short_run_completes_and_counts_each_call() -> None:
    model = TestModel()  # Pydantic AI's own test double: calls every tool once, then answers
    capability = VeronicaCapability(config=limits(10))
    agent = Agent(model, capabilities=[capability])
    ran: list[str] = []

    @agent.tool_plain
    def lookup(q: str) -> str:
        ran.append(q)
        return "found"

    result = agent.run_sync("find it")
    assert result.output
    ctx = capability.owned_context
    assert ctx is not None and not ctx.aborted
    assert len(ran) == 1
    assert [node.kind for node in ctx.graph.nodes()] == ["llm", "tool", "llm"]


def test_binding_explicit_context_wins_over_the_current_one() -> None:
    fake = Runaway()
    mine = ExecutionContext(limits(3))
    agent = fake.agent([VeronicaCapability(mine)])
    with ExecutionContext(limits(50)) as current, pytest.raises(ExecutionHalted):
        agent.run_sync("weather?")
    assert mine.get_snapshot().step_count == 3
    assert current.get_snapshot().step_count == 0


def test_binding_current_context_then_uncontained() -> None:
    fake = Runaway(model_name="function-model")
    agent = fake.agent([VeronicaCapability()])
    with ExecutionContext(limits(4)) as ctx, pytest.raises(ExecutionHalted):
        agent.run_sync("weather?")
    assert ctx.get_snapshot().step_count == fake.executions == 4

    # Outside any context, with no config, nothing is counted: pydantic-ai's own limit ends the run.
    fake = Runaway(model_name="function-model")
    agent = fake.agent([VeronicaCapability()])
    with pytest.raises(UsageLimitExceeded):
        agent.run_sync("weather?", usage_limits=UsageLimits(request_limit=3))
    assert fake.model_calls == 3


def test_owned_context_is_shared_until_reset() -> None:
    fake = Runaway()
    capability = VeronicaCapability(config=limits(3))
    agent = fake.agent([capability])
    with pytest.raises(ExecutionHalted):
        agent.run_sync("weather?")
    first = capability.owned_context
    with pytest.raises(ExecutionHalted):  # the same, spent, context: refused at once
        agent.run_sync("weather?")
    assert fake.executions == 3
    capability.reset()
    with pytest.raises(ExecutionHalted):
        agent.run_sync("weather?")
    assert fake.executions == 6
    assert capability.owned_context is not first


def test_concurrent_async_runs_each_get_their_own_context() -> None:
    fakes = [Runaway() for _ in range(6)]
    capability = VeronicaCapability()  # one capability, bound per task to the task's context

    async def one(fake: Runaway, steps: int) -> int:
        agent = fake.agent([capability])
        async with ExecutionContext(limits(steps)) as ctx:
            with pytest.raises(ExecutionHalted):
                await agent.run("weather?")
            return ctx.get_snapshot().step_count

    async def main() -> list[int]:
        return await asyncio.gather(*(one(fake, 3 + i) for i, fake in enumerate(fakes)))

    assert asyncio.run(main()) == [3 + i for i in range(6)]
    assert [fake.executions for fake in fakes] == [3 + i for i in range(6)]


def test_concurrent_threads_with_run_sync() -> None:
    fakes = [Runaway() for _ in range(4)]
    capability = VeronicaCapability()
    counts: dict[int, int] = {}
    barrier = threading.Barrier(len(fakes))

    def one(i: int) -> None:
        agent = fakes[i].agent([capability])
        barrier.wait()
        with ExecutionContext(limits(2 + i)) as ctx:
            try:
                agent.run_sync("weather?")
            except ExecutionHalted:
                counts[i] = ctx.get_snapshot().step_count
            finally:
                close_run_sync_loop()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(fakes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert counts == {i: 2 + i for i in range(len(fakes))}
    assert [fake.executions for fake in fakes] == [2 + i for i in range(len(fakes))]


def test_a_sub_agent_in_a_tool_counts_in_the_same_context() -> None:
    inner = Runaway()
    sub = inner.agent([VeronicaCapability()])
    outer = Runaway()
    agent = Agent(outer.model, capabilities=[VeronicaCapability()])

    @agent.tool_plain
    async def weather(city: str) -> str:
        outer.tool_calls += 1
        return (await sub.run(f"weather in {city}?")).output

    with ExecutionContext(limits(5)) as ctx, pytest.raises(ExecutionHalted) as caught:
        agent.run_sync("weather?")
    assert_plain_halt(caught.value, HaltReason.STEP_LIMIT)
    # outer model, outer tool -> inner model, inner tool, inner model, then refused
    assert (outer.model_calls, outer.tool_calls, inner.model_calls, inner.tool_calls) == (1, 1, 2, 1)
    nodes = ctx.graph.nodes()
    assert len(nodes) == 5
    assert all(node.parent_id == nodes[1].node_id for node in nodes[2:])  # under the outer tool


def test_two_capabilities_on_one_run_count_each_call_once() -> None:
    fake = Runaway()
    agent = fake.agent([VeronicaCapability()])
    with ExecutionContext(limits(4)) as ctx, pytest.raises(ExecutionHalted):
        agent.run_sync("weather?", capabilities=[VeronicaCapability()])  # both bind to ctx
    assert ctx.get_snapshot().step_count == fake.executions == 4


def test_two_capabilities_bound_to_two_contexts_count_in_each() -> None:
    fake = Runaway()
    run_ctx, agent_ctx = ExecutionContext(limits(3)), ExecutionContext(limits(50))
    agent = fake.agent([VeronicaCapability(agent_ctx)])
    with pytest.raises(ExecutionHalted):
        agent.run_sync("weather?", capabilities=[VeronicaCapability(run_ctx)])
    assert fake.executions == 3
    assert run_ctx.get_snapshot().step_count == agent_ctx.get_snapshot().step_count == 3


class Rewrapping(AbstractCapability[Any]):
    """A third-party capability that turns every run failure into its own error type."""

    async def on_run_error(self, ctx: RunContext[Any], *, error: BaseException) -> Any:
        raise RuntimeError("the run failed") from error


@pytest.mark.parametrize("form", FORMS)
def test_a_halt_another_capability_wrapped_still_reaches_the_caller(form: str) -> None:
    fake = Runaway()
    agent = fake.agent([Rewrapping(), VeronicaCapability(config=limits(3))])
    with pytest.raises(ExecutionHalted) as caught:
        run_form(agent, form)
    assert_plain_halt(caught.value, HaltReason.STEP_LIMIT)
    assert fake.executions == 3


@pytest.mark.skipif(
    not hasattr(AbstractCapability, "get_wrapper_model"), reason="pydantic-ai < 2.62: no ModelFallback"
)
def test_each_fallback_attempt_is_its_own_step() -> None:
    from pydantic_ai.capabilities import ModelFallback
    from pydantic_ai.exceptions import ModelHTTPError

    attempts: list[str] = []

    def down(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        attempts.append("primary")
        raise ModelHTTPError(503, "primary-model", body="overloaded")

    backup = Answering("from the backup")
    agent = Agent(
        FunctionModel(down, model_name="primary-model"),
        capabilities=[VeronicaCapability(), ModelFallback(backup.model)],
    )
    with ExecutionContext(limits(10)) as ctx:
        assert agent.run_sync("question").output == "from the backup"
    assert (attempts, backup.calls) == (["primary"], 1)
    nodes = ctx.graph.nodes()
    assert [(node.kind, node.status) for node in nodes] == [("llm", "error"), ("llm", "ok")]
    assert ctx.get_snapshot().retries_used == 1  # the failed attempt was retried on the backup
