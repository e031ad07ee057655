"""Stop a runaway LangGraph agent, offline (fake model): ``python examples/langgraph_agent.py``.

The fake model asks for a tool on every turn, so the agent would loop until LangGraph's recursion
limit. Two ways to bound it:

1. a hand-built graph with every node wrapped by ``veronica_graph`` (each node execution a step);
2. LangChain v1 ``create_agent`` with ``VeronicaAgentMiddleware(exit_behavior="end")``, which ends
   the agent with the messages so far instead of raising.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import tool
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from typing_extensions import TypedDict

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters.langchain import VeronicaAgentMiddleware
from veronica_mw.adapters.langgraph import veronica_graph


class LoopingModel(BaseChatModel):
    """Always wants the weather tool again (a fake model; no network)."""

    @property
    def _llm_type(self) -> str:
        return "looping-fake"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        call = {"name": "weather", "args": {"city": "Oslo"}, "id": f"call_{len(messages)}"}
        usage: Any = {"input_tokens": 800, "output_tokens": 40, "total_tokens": 840}
        message = AIMessage(
            content="", tool_calls=[call], usage_metadata=usage, response_metadata={"model_name": "gpt-4o"}
        )
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool
def weather(city: str) -> str:
    """Current weather in a city."""
    return f"rain in {city}"


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def hand_built_graph() -> None:
    model = LoopingModel()

    def agent(state: State) -> dict[str, list[AnyMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([weather]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = veronica_graph(builder, kinds={"agent": "llm"}).compile()

    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=7, max_retries_total=2))
    try:
        with ctx:
            graph.invoke({"messages": [HumanMessage("Should I bike today?")]}, {"recursion_limit": 100})
    except ExecutionHalted as halt:
        snap = halt.snapshot
        assert snap is not None
        print(f"graph halted: {halt.reason}; steps {snap.step_count}, cost ${snap.cost_usd_accumulated:.4f}")


def v1_agent() -> None:
    middleware = VeronicaAgentMiddleware(
        config=ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=2), exit_behavior="end"
    )
    agent = create_agent(LoopingModel(), tools=[weather], middleware=[middleware])
    state = agent.invoke({"messages": [HumanMessage("Should I bike today?")]})
    print(f"agent ended with {len(state['messages'])} messages; last: {state['messages'][-1].content!r}")


if __name__ == "__main__":
    hand_built_graph()
    v1_agent()
