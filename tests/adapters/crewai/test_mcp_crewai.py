"""CrewAI + MCP: a CrewAI tool that calls an MCP server is one step, not two.

CrewAI's tool hook begins the tool's step and the MCP instrumentation sees the same operation as
``tools/call``; the latter joins the former, so steps == model calls + tool calls and
``max_steps=N`` lets exactly N operations run. The tool calls a real in-process MCP server (mcp
1.x, which crewai pins, over memory streams) the way CrewAI's own MCP tools do: ``asyncio.run``
of a client session in the tool's context.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from crewai import Agent, Crew, Task
from crewai.tools import BaseTool
from mcp.server.fastmcp import FastMCP
from mcp.shared.memory import create_connected_server_and_client_session

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted

from .fakes import MODEL, ToolLoopLLM

# CrewAI reads its own deprecated Agent fields (function_calling_llm, ...) while validating.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai")

SERVER = FastMCP("facts")
RECEIVED: list[str] = []


@SERVER.tool()
def lookup(query: str) -> str:
    """Look a query up."""
    RECEIVED.append(query)
    return f"result for {query}"


class McpLookup(BaseTool):
    name: str = "lookup"
    description: str = "Look a query up."

    def _run(self, query: str) -> str:
        async def call() -> str:
            async with create_connected_server_and_client_session(SERVER._mcp_server) as session:
                result = await session.call_tool("lookup", {"query": query})
                return str(result.content[0].text)  # type: ignore[union-attr]

        return asyncio.run(call())


@pytest.fixture(autouse=True)
def instrumented() -> Iterator[None]:
    RECEIVED.clear()
    names = veronica_mw.instrument()  # the default set: the CrewAI adapter and the MCP client
    assert {"crewai", "mcp"} <= set(names)
    yield
    veronica_mw.uninstrument()


@pytest.mark.parametrize("steps", [6, 5])
def test_an_mcp_tool_is_one_step(steps: int) -> None:
    llm = ToolLoopLLM(model=MODEL, native=True)
    agent = Agent(role="researcher", goal="find facts", backstory="thorough", llm=llm, tools=[McpLookup()])
    crew = Crew(agents=[agent], tasks=[Task(description="research", expected_output="facts", agent=agent)])
    config = ExecutionConfig(max_cost_usd=10.0, max_steps=steps, max_retries_total=0)
    with ExecutionContext(config) as ctx, pytest.raises(ExecutionHalted):
        crew.kickoff()
    model_calls = llm.calls + llm.acalls
    # model, tool, model, tool, model, tool: at 6 the 4th model call is refused, at 5 the 3rd tool.
    assert (model_calls, len(RECEIVED)) == ((3, 3) if steps == 6 else (3, 2))
    assert ctx.get_snapshot().step_count == steps == model_calls + len(RECEIVED)
    tools = [n for n in ctx.graph.nodes() if n.kind == "tool"]
    assert len(tools) == len(RECEIVED) and all(n.settled for n in tools)
