"""VeronicaAgentMiddleware with LangChain v1 ``create_agent`` and a fake model that always wants a tool."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from genai_prices import Usage, calc_price
from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, tool

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters.langchain import VeronicaAgentMiddleware, VeronicaCallbackHandler

MODEL = "gpt-4o"
PRICE = float(calc_price(Usage(input_tokens=1000, output_tokens=500), model_ref=MODEL).total_price)


class AlwaysToolModel(BaseChatModel):
    """A fake chat model that asks for the ``lookup`` tool on every call (an agent that never ends)."""

    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "always-tool-fake"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls += 1
        message = AIMessage(
            content="",
            tool_calls=[{"name": "lookup", "args": {"city": "Oslo"}, "id": f"call_{self.calls}"}],
            usage_metadata={"input_tokens": 1000, "output_tokens": 500, "total_tokens": 1500},
            response_metadata={"model_name": MODEL},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])


def make_tool() -> tuple[BaseTool, list[str]]:
    runs: list[str] = []

    @tool
    def lookup(city: str) -> str:
        """Look up the weather in a city."""
        runs.append(city)
        return f"sunny in {city}"

    return lookup, runs


def limits(**kwargs: Any) -> ExecutionConfig:
    base: dict[str, Any] = {"max_cost_usd": 100.0, "max_steps": 100, "max_retries_total": 0}
    return ExecutionConfig(**{**base, **kwargs})


START: Any = {"messages": [HumanMessage("weather?")]}


def test_raise_stops_create_agent() -> None:
    m, (lookup, runs) = AlwaysToolModel(), make_tool()
    middleware = VeronicaAgentMiddleware(config=limits(max_steps=5))
    agent = create_agent(m, tools=[lookup], middleware=[middleware])
    with pytest.raises(ExecutionHalted) as info:
        agent.invoke(START)
    assert info.value.reason == "step_limit"
    # model, tool, model, tool, model = 5 steps; the sixth (a tool call) was refused.
    assert (m.calls, len(runs)) == (3, 2)
    owned = middleware.owned_context
    assert owned is not None
    assert owned.get_snapshot().step_count == 5
    assert owned.get_snapshot().cost_usd_accumulated == pytest.approx(3 * PRICE)


@pytest.mark.anyio
async def test_raise_stops_create_agent_async() -> None:
    m, (lookup, runs) = AlwaysToolModel(), make_tool()
    ctx = ExecutionContext(limits(max_steps=4))
    agent = create_agent(m, tools=[lookup], middleware=[VeronicaAgentMiddleware(ctx)])
    with pytest.raises(ExecutionHalted) as info:
        await agent.ainvoke(START)
    assert info.value.reason == "step_limit"
    assert (m.calls, len(runs)) == (2, 2)


@pytest.mark.parametrize("is_async", [False, True])
def test_end_returns_the_partial_result(is_async: bool) -> None:
    import asyncio

    m, (lookup, runs) = AlwaysToolModel(), make_tool()
    ctx = ExecutionContext(limits(max_steps=5))
    agent = create_agent(m, tools=[lookup], middleware=[VeronicaAgentMiddleware(ctx, exit_behavior="end")])
    state = asyncio.run(agent.ainvoke(START)) if is_async else agent.invoke(START)
    messages = state["messages"]
    assert (m.calls, len(runs)) == (3, 2)
    # The refused tool call is answered with an error ToolMessage, the refused model call with an
    # AIMessage without tool calls, which ends the agent.
    assert isinstance(messages[-2], ToolMessage) and messages[-2].status == "error"
    last = messages[-1]
    assert isinstance(last, AIMessage) and not last.tool_calls
    assert last.response_metadata["veronica_mw"]["reason"] == "step_limit"
    assert sum(isinstance(msg, AIMessage) and bool(msg.tool_calls) for msg in messages) == 3
    assert ctx.aborted and ctx.get_snapshot().step_count == 5


def test_middleware_explicit_handler_and_hook_together_count_each_call_once() -> None:
    m, (lookup, runs) = AlwaysToolModel(), make_tool()
    ctx = ExecutionContext(limits(max_steps=7))
    agent = create_agent(m, tools=[lookup], middleware=[VeronicaAgentMiddleware()])
    with ctx, pytest.raises(ExecutionHalted) as info:
        agent.invoke(START, config={"callbacks": [VeronicaCallbackHandler(), VeronicaCallbackHandler(ctx)]})
    assert info.value.reason == "step_limit"
    assert (m.calls, len(runs)) == (4, 3)
    snap = ctx.get_snapshot()
    assert snap.step_count == 7
    assert snap.cost_usd_accumulated == pytest.approx(4 * PRICE)
    kinds = [n.kind for n in ctx.graph.nodes()]
    assert kinds == ["llm", "tool"] * 3 + ["llm"]
    # The real usage reached the middleware's steps through the adopting handlers.
    assert [n.tokens_in for n in ctx.graph.nodes() if n.kind == "llm"] == [1000] * 4


def test_cost_ceiling_stops_the_agent() -> None:
    m, (lookup, _) = AlwaysToolModel(), make_tool()
    agent = create_agent(m, tools=[lookup], middleware=[VeronicaAgentMiddleware(cost_estimate_hint=PRICE)])
    ctx = ExecutionContext(limits(max_cost_usd=2.5 * PRICE))
    with ctx, pytest.raises(ExecutionHalted) as info:
        agent.invoke(START)
    assert info.value.reason == "budget_exceeded"
    assert m.calls == 2


def test_tool_error_is_recorded_and_propagates() -> None:
    calls: list[int] = []

    @tool
    def lookup(city: str) -> str:
        """Always fails."""
        calls.append(1)
        raise ConnectionError("weather service down")

    ctx = ExecutionContext(limits(max_retries_total=3))
    agent = create_agent(AlwaysToolModel(), tools=[lookup], middleware=[VeronicaAgentMiddleware(ctx)])
    with pytest.raises(ConnectionError):
        agent.invoke(START)
    snap = ctx.get_snapshot()
    assert (len(calls), snap.retries_used, snap.step_count) == (1, 1, 2)


def test_uncontained_without_context_or_config() -> None:
    m = AlwaysToolModel()
    lookup, runs = make_tool()
    agent = create_agent(m, tools=[lookup], middleware=[VeronicaAgentMiddleware()])
    with pytest.raises(Exception) as info:  # LangGraph's own recursion limit ends this run
        agent.invoke(START, config={"recursion_limit": 6})
    assert not isinstance(info.value, ExecutionHalted)
    assert m.calls == 3


def test_invalid_exit_behavior() -> None:
    with pytest.raises(ValueError, match="exit_behavior"):
        VeronicaAgentMiddleware(exit_behavior="error")  # type: ignore[arg-type]
