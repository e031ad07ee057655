"""LangGraph agents (model node + ToolNode) contained zero-config, with veronica_graph, and under FastAPI."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Annotated, Any

import httpx
import pytest
from fastapi import FastAPI
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableLambda
from langchain_core.tools import BaseTool, tool
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from typing_extensions import TypedDict

import veronica_mw.adapters.langchain  # noqa: F401  (registers zero-config binding)
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters.langgraph import veronica_graph
from veronica_mw.web.asgi import VeronicaASGIMiddleware

from ...support.servers import UvicornServer


class AgentState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


class AlwaysToolModel(BaseChatModel):
    """Fake chat model that asks for the ``lookup`` tool on every call."""

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
            usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
            response_metadata={"model_name": "gpt-4o"},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])


class Agent:
    """A hand-built ReAct loop: model node -> ToolNode -> model node ... (never ends by itself)."""

    def __init__(self) -> None:
        self.model = AlwaysToolModel()
        self.tool_runs: list[str] = []
        runs = self.tool_runs

        @tool
        def lookup(city: str) -> str:
            """Look up the weather in a city."""
            runs.append(city)
            return f"sunny in {city}"

        self.tools: list[BaseTool] = [lookup]

    def builder(self) -> StateGraph[AgentState, None, AgentState, AgentState]:
        model = self.model

        def agent(state: AgentState) -> dict[str, list[AnyMessage]]:
            return {"messages": [model.invoke(state["messages"])]}

        async def aagent(state: AgentState) -> dict[str, list[AnyMessage]]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        builder = StateGraph(AgentState)
        builder.add_node("agent", RunnableLambda(agent, aagent))
        builder.add_node("tools", ToolNode(self.tools))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
        return builder


START_STATE: Any = {"messages": [HumanMessage("weather?")]}


def limits(**kwargs: Any) -> ExecutionConfig:
    base: dict[str, Any] = {"max_cost_usd": 100.0, "max_steps": 100, "max_retries_total": 0}
    return ExecutionConfig(**{**base, **kwargs})


def test_zero_config_contains_a_langgraph_agent() -> None:
    a = Agent()
    ctx = ExecutionContext(limits(max_steps=5))
    with ctx, pytest.raises(ExecutionHalted) as info:
        a.builder().compile().invoke(START_STATE, {"recursion_limit": 100})
    assert info.value.reason == "step_limit"
    assert (a.model.calls, len(a.tool_runs)) == (3, 2)


@pytest.mark.anyio
async def test_zero_config_contains_a_langgraph_agent_async() -> None:
    a = Agent()
    ctx = ExecutionContext(limits(max_steps=6))
    async with ctx:
        with pytest.raises(ExecutionHalted):
            await a.builder().compile().ainvoke(START_STATE, {"recursion_limit": 100})
    assert (a.model.calls, len(a.tool_runs)) == (3, 3)


def test_veronica_graph_node_steps_adopt_the_calls_inside() -> None:
    a = Agent()
    graph = veronica_graph(a.builder(), kinds={"agent": "llm"}).compile()
    ctx = ExecutionContext(limits(max_steps=5))
    with ctx, pytest.raises(ExecutionHalted):
        graph.invoke(START_STATE, {"recursion_limit": 100})
    # Node step and model/tool run are one step each: not 2 steps per node execution.
    assert (a.model.calls, len(a.tool_runs)) == (3, 2)
    nodes = ctx.graph.nodes()
    assert [(n.kind, n.name) for n in nodes] == [("llm", "agent"), ("tool", "tools")] * 2 + [("llm", "agent")]
    assert [n.tokens_in for n in nodes if n.kind == "llm"] == [10, 10, 10]  # usage from the handler


def test_node_kind_mismatch_counts_node_and_call_separately() -> None:
    a = Agent()
    graph = veronica_graph(a.builder()).compile()  # "agent" stays a tool step; its model call is another
    ctx = ExecutionContext(limits(max_steps=5))
    with ctx, pytest.raises(ExecutionHalted):
        graph.invoke(START_STATE, {"recursion_limit": 100})
    # agent-node, model, tools-node(adopts tool run), agent-node, model = 5
    assert (a.model.calls, len(a.tool_runs)) == (2, 1)


# -- FastAPI under the ASGI middleware: the halt becomes the client's 429 -------------------------------


@pytest.fixture
def served() -> Iterator[tuple[str, list[Agent]]]:
    agents: list[Agent] = []
    app = FastAPI()

    @app.post("/agent")
    async def run_agent() -> dict[str, int]:
        a = Agent()
        agents.append(a)
        state = await a.builder().compile().ainvoke(START_STATE, {"recursion_limit": 100})
        return {"messages": len(state["messages"])}

    @app.post("/agent-sync")
    def run_agent_sync() -> dict[str, int]:  # FastAPI runs it in its threadpool
        a = Agent()
        agents.append(a)
        graph = veronica_graph(a.builder(), kinds={"agent": "llm"}).compile()
        state = graph.invoke(START_STATE, {"recursion_limit": 100})
        return {"messages": len(state["messages"])}

    wrapped = VeronicaASGIMiddleware(app, config=limits(max_steps=5))
    with UvicornServer(wrapped) as server:
        yield server.url, agents


@pytest.mark.parametrize("path", ["/agent", "/agent-sync"])
def test_fastapi_request_limit_turns_an_agent_into_429(served: tuple[str, list[Agent]], path: str) -> None:
    url, agents = served
    for _ in range(2):  # each request has its own context: both get the full budget
        response = httpx.post(url + path, timeout=30)
        assert response.status_code == 429
        assert response.headers["content-type"].startswith("application/problem+json")
        assert response.json()["reason"] == "step_limit"
    assert [(a.model.calls, len(a.tool_runs)) for a in agents] == [(3, 2), (3, 2)]
