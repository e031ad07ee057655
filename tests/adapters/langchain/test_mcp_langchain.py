"""LangChain + MCP (``langchain-mcp-adapters``): an MCP tool run by a LangChain agent is one step.

The LangChain adapter begins the tool run's step and the MCP instrumentation sees the same call as
``tools/call``; the latter joins the former, so steps == model calls + tool calls and
``max_steps=N`` lets exactly N operations run. A real in-process MCP server (mcp 1.x, over
memory streams) counts the calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_mcp_adapters.tools import load_mcp_tools
from mcp.server.fastmcp import FastMCP  # mcp 1.x: what langchain-mcp-adapters 0.3 is built on
from mcp.shared.memory import create_connected_server_and_client_session

import veronica_mw
from veronica_mw import ExecutionContext, ExecutionHalted

from .test_agent_middleware import START, AlwaysToolModel, limits


@pytest.fixture(autouse=True)
def instrumented() -> Iterator[None]:
    names = veronica_mw.instrument()  # the default set: the LangChain adapter and the MCP client
    assert {"langchain", "mcp"} <= set(names)
    yield
    veronica_mw.uninstrument()


@pytest.mark.anyio
@pytest.mark.parametrize("steps", [6, 5])
async def test_an_mcp_tool_is_one_step(steps: int) -> None:
    app = FastMCP("weather")
    received: list[Any] = []

    @app.tool()
    def lookup(city: str) -> str:
        """Look up the weather in a city."""
        received.append(city)
        return f"sunny in {city}"

    model = AlwaysToolModel()
    async with create_connected_server_and_client_session(app._mcp_server) as session:
        tools = await load_mcp_tools(session)
        agent = create_agent(model, tools=tools)
        async with ExecutionContext(limits(max_steps=steps)) as ctx:
            with pytest.raises(ExecutionHalted):
                await agent.ainvoke(START)
    # model, tool, model, tool, model, tool: at 6 the 4th model call is refused, at 5 the 3rd tool.
    assert (model.calls, len(received)) == ((3, 3) if steps == 6 else (3, 2))
    assert ctx.get_snapshot().step_count == steps == model.calls + len(received)
    tools_run = [n for n in ctx.graph.nodes() if n.kind == "tool"]
    assert len(tools_run) == len(received) and all(n.name == "lookup" for n in tools_run)
