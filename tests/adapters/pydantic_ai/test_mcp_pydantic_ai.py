"""Pydantic AI + MCP: a tool of an in-process FastMCP server, run through ``MCPToolset``, is one
step: the MCP instrumentation joins the capability's tool step, so steps == model requests + tool
runs and ``max_steps=N`` lets exactly N operations run (``pydantic-ai`` env: fastmcp over mcp 2.x)."""

from __future__ import annotations

from collections.abc import Iterator

import fastmcp
import pytest
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted

from .fakes import Runaway


@pytest.fixture(autouse=True)
def instrumented() -> Iterator[None]:
    names = veronica_mw.instrument()  # the default set: the Pydantic AI capability and the MCP client
    assert {"pydantic-ai", "mcp"} <= set(names)
    yield
    veronica_mw.uninstrument()


@pytest.mark.anyio
@pytest.mark.parametrize("steps", [6, 5])
async def test_an_mcp_tool_is_one_step(steps: int) -> None:
    server = fastmcp.FastMCP("weather")
    received: list[str] = []

    @server.tool
    def weather(city: str) -> str:
        """Current weather in a city."""
        received.append(city)
        return f"rain in {city}"

    runaway = Runaway()  # asks for ``weather`` on every turn
    agent = Agent(runaway.model, toolsets=[MCPToolset(server)])
    config = ExecutionConfig(max_cost_usd=10.0, max_steps=steps, max_retries_total=0)
    async with ExecutionContext(config) as ctx:
        with pytest.raises(ExecutionHalted):
            await agent.run("weather?")
    # model, tool, model, tool, model, tool: at 6 the 4th request is refused, at 5 the 3rd tool.
    assert (runaway.model_calls, len(received)) == ((3, 3) if steps == 6 else (3, 2))
    assert ctx.get_snapshot().step_count == steps == runaway.model_calls + len(received)
    tools = [n for n in ctx.graph.nodes() if n.kind == "tool"]
    assert len(tools) == len(received) and all(n.name == "pydantic_ai.tool:weather" for n in tools)
