"""``veronica-mw run`` on an unmodified Pydantic AI script with an in-process FastMCP server: the
capability and the MCP instrumentation are switched on by the run, and an MCP tool is one step
(steps == model requests + tool bodies that ran, and ``--max-steps N`` lets exactly N run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ...support.run_cli import run_script
from .fakes import PRICE

SCRIPT = """
import asyncio
import fastmcp
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from tests.adapters.pydantic_ai.fakes import Runaway

server = fastmcp.FastMCP("weather")
received = []

@server.tool
def weather(city: str) -> str:
    \"\"\"Current weather in a city.\"\"\"
    received.append(city)
    return f"rain in {city}"

runaway = Runaway()  # asks for ``weather`` on every turn
agent = Agent(runaway.model, toolsets=[MCPToolset(server)])
try:
    asyncio.run(agent.run("weather?"))
finally:
    print(runaway.model_calls, len(received))
"""


@pytest.mark.parametrize(("steps", "ran"), [(6, (3, 3)), (5, (3, 2))])
def test_run_counts_an_mcp_tool_once(tmp_path: Path, steps: int, ran: tuple[int, int]) -> None:
    done, report = run_script(tmp_path, SCRIPT, ["--max-steps", str(steps)])
    assert done.returncode == 3, done.stderr[-3000:]
    # model, tool, model, tool, model, tool: at 6 the 4th request is refused, at 5 the 3rd tool.
    model_calls, tools = map(int, done.stdout.split()[-2:])
    assert (model_calls, tools) == ran
    assert (report["steps"], report["reason"]) == (steps, "step_limit") and steps == model_calls + tools


def test_run_halts_an_mcp_loop_on_cost(tmp_path: Path) -> None:
    # Each request reserves its prompt + 200 output tokens (well under PRICE) and settles at PRICE:
    # the 3rd request no longer fits after two settled ones.
    budget = 2 * PRICE + 0.001
    flags = ["--max-cost-usd", repr(budget), "--max-output-tokens", "200"]
    done, report = run_script(tmp_path, SCRIPT, flags)
    assert done.returncode == 3, done.stderr[-3000:]
    model_calls, tools = map(int, done.stdout.split()[-2:])
    assert (model_calls, tools) == (2, 2)
    assert (report["steps"], report["reason"]) == (4, "budget_exceeded")
    assert report["cost_usd"] == pytest.approx(2 * PRICE)
