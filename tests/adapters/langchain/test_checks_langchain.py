"""Output checks through LangChain: the agent middleware re-asks with feedback, retry loops re-ask."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult, LLMResult
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import RetryPolicy

from veronica_mw import (
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    JsonOutput,
    ModelOutput,
    OutputRejected,
)
from veronica_mw.adapters import langchain as vlc
from veronica_mw.adapters.langchain import VeronicaAgentMiddleware

from .fakes import PRICE, priced_message


class RecordingChatModel(FakeMessagesListChatModel):
    """LangChain's list fake, recording the conversation each real call was given."""

    seen: list[list[BaseMessage]] = []

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.seen.append(list(messages))
        return super()._generate(messages, stop, run_manager, **kwargs)

    @property
    def calls(self) -> int:
        return len(self.seen)


def scripted(*texts: str) -> RecordingChatModel:
    return RecordingChatModel(responses=[priced_message(t) for t in texts], seen=[])


def limits(retries: int) -> ExecutionConfig:
    return ExecutionConfig(max_cost_usd=100.0, max_steps=100, max_retries_total=retries)


@pytest.fixture(params=["with-callbacks", "middleware-only"])
def auto(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run each agent test with the zero-config handler (which then settles the step) and without."""
    if request.param == "middleware-only":
        vlc.disable_auto_instrumentation()
    try:
        yield request.param
    finally:
        vlc.enable_auto_instrumentation()


@pytest.mark.parametrize("is_async", [False, True])
def test_agent_middleware_reasks_with_the_checks_feedback(auto: str, is_async: bool) -> None:
    model = scripted("not json", "{broken", '{"city": "Oslo"}')
    ctx = ExecutionContext(limits(retries=2), checks=[JsonOutput()])
    agent = create_agent(model, tools=[], middleware=[VeronicaAgentMiddleware(ctx)])
    start: Any = {"messages": [HumanMessage("weather as JSON?")]}
    state = asyncio.run(agent.ainvoke(start)) if is_async else agent.invoke(start)
    assert model.calls == 3
    # The second call saw the rejected answer and the check's feedback as a user message.
    second = model.seen[1]
    assert [type(m).__name__ for m in second] == ["HumanMessage", "AIMessage", "HumanMessage"]
    assert second[1].content == "not json"
    assert "json_output" in str(second[2].content) and "not valid JSON" in str(second[2].content)
    assert "Expecting property name" in str(model.seen[2][-1].content)
    # The agent's state keeps only the answer that passed.
    assert [m.content for m in state["messages"]] == ["weather as JSON?", '{"city": "Oslo"}']
    snap = ctx.get_snapshot()
    assert (snap.step_count, snap.retries_used, snap.aborted) == (3, 2, False)
    assert snap.cost_usd_accumulated == pytest.approx(3 * PRICE)
    assert [n.status for n in ctx.graph.nodes()] == ["rejected", "rejected", "ok"]


def test_agent_reasks_are_bounded_by_the_retry_budget(auto: str) -> None:
    model = scripted("no", "no", '{"a": 1}')
    ctx = ExecutionContext(limits(retries=1), checks=[JsonOutput()])
    agent = create_agent(model, tools=[], middleware=[VeronicaAgentMiddleware(ctx)])
    with pytest.raises(ExecutionHalted) as info:
        agent.invoke({"messages": [HumanMessage("hi")]})
    assert info.value.reason == "retry_limit"
    assert model.calls == 2


def test_agent_halt_check_ends_the_agent_with_the_partial_result(auto: str) -> None:
    model = scripted("rambling")
    ctx = ExecutionContext(limits(retries=5), checks=[(JsonOutput(), "halt")])
    middleware = VeronicaAgentMiddleware(ctx, exit_behavior="end")
    state = create_agent(model, tools=[], middleware=[middleware]).invoke({"messages": [HumanMessage("hi")]})
    last = state["messages"][-1]
    assert last.response_metadata["veronica_mw"]["reason"] == "verification_failed"
    assert model.calls == 1 and ctx.abort_reason == "verification_failed"


def test_with_retry_reasks_through_the_zero_config_handler() -> None:
    model = scripted("nope", "nope", "[1, 2]")
    ctx = ExecutionContext(limits(retries=2), checks=[JsonOutput()])
    with ctx:
        answer = model.with_retry(stop_after_attempt=10, wait_exponential_jitter=False).invoke("list?")
    assert answer.content == "[1, 2]" and model.calls == 3
    assert ctx.get_snapshot().retries_used == 2


def test_langgraph_default_retry_policy_reasks() -> None:
    model = scripted("nope", '{"done": true}')

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model, retry_policy=RetryPolicy(max_attempts=5, initial_interval=0.0))
    graph.add_edge(START, "model")
    graph.add_edge("model", END)
    ctx = ExecutionContext(limits(retries=3), checks=[JsonOutput()])
    with ctx:
        state = graph.compile().invoke({"messages": [HumanMessage("go")]})
    assert state["messages"][-1].content == '{"done": true}'
    assert model.calls == 2 and ctx.get_snapshot().retries_used == 1


def test_without_a_retry_loop_the_rejection_reaches_the_caller() -> None:
    model = scripted("nope")
    with ExecutionContext(limits(retries=3), checks=[JsonOutput()]), pytest.raises(OutputRejected) as info:
        model.invoke("hi")
    assert info.value.check == "json_output"
    assert isinstance(info.value.output, ModelOutput) and info.value.output.text == "nope"


def test_text_of_langchain_objects() -> None:
    blocks = AIMessage(content=[{"type": "text", "text": "a"}, {"type": "tool_use", "id": "1"}, "b"])
    assert ModelOutput(blocks).text == "ab"
    generation = ChatGeneration(message=AIMessage(content="gen"))
    assert ModelOutput(generation).text == "gen"
    assert ModelOutput(LLMResult(generations=[[generation]])).text == "gen"
