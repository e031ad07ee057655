"""``veronica-mw run`` on an unmodified LangChain agent whose tools come from an MCP server through
``langchain-mcp-adapters``: the LangChain adapter and the MCP instrumentation are switched on by the
run, and an MCP tool call is one step (steps == model calls + tool bodies that ran)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ...support.run_cli import run_script
from .test_agent_middleware import PRICE

SCRIPT = """
import asyncio
from langchain.agents import create_agent
from langchain_mcp_adapters.tools import load_mcp_tools
from mcp.server.fastmcp import FastMCP
from mcp.shared.memory import create_connected_server_and_client_session
from tests.adapters.langchain.test_agent_middleware import START, AlwaysToolModel

app = FastMCP("weather")
received = []

@app.tool()
def lookup(city: str) -> str:
    \"\"\"Look up the weather in a city.\"\"\"
    received.append(city)
    return f"sunny in {city}"

model = AlwaysToolModel()  # asks for ``lookup`` on every call

async def main():
    async with create_connected_server_and_client_session(app._mcp_server) as session:
        agent = create_agent(model, tools=await load_mcp_tools(session))
        await agent.ainvoke(START)

try:
    asyncio.run(main())
finally:
    print(model.calls, len(received))
"""


@pytest.mark.parametrize(("steps", "ran"), [(6, (3, 3)), (5, (3, 2))])
def test_run_counts_an_mcp_tool_once(tmp_path: Path, steps: int, ran: tuple[int, int]) -> None:
    done, report = run_script(tmp_path, SCRIPT, ["--max-steps", str(steps)])
    assert done.returncode == 3, done.stderr[-3000:]
    # model, tool, model, tool, model, tool: at 6 the 4th model call is refused, at 5 the 3rd tool.
    model_calls, tools = map(int, done.stdout.split()[-2:])
    assert (model_calls, tools) == ran
    assert (report["steps"], report["reason"]) == (steps, "step_limit") and steps == model_calls + tools


def test_run_halts_an_mcp_loop_on_cost(tmp_path: Path) -> None:
    # The fake model's prompt is short, so each call reserves less than the 1000 + 500 tokens it
    # reports: the 3rd call fits the reservation, its settled usage takes the run over the budget,
    # and the run halts there (a call sent is never free): its tool is refused.
    budget = 2.5 * PRICE
    done, report = run_script(tmp_path, SCRIPT, ["--max-cost-usd", repr(budget)])
    assert done.returncode == 3, done.stderr[-3000:]
    model_calls, tools = map(int, done.stdout.split()[-2:])
    assert (model_calls, tools, report["steps"]) == (3, 2, 5), report
    assert report["reason"] == "budget_exceeded" and "actual cost" in report["detail"]
    assert report["cost_usd"] == pytest.approx(3 * PRICE)
