"""``veronica-mw run`` on an unmodified CrewAI script whose tool calls an in-process MCP server: the
CrewAI adapter and the MCP instrumentation are switched on by the run, and the MCP call joins the
tool's step (steps == model calls + tool bodies that ran, ``--max-steps N`` lets exactly N run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ...support.run_cli import run_script
from .fakes import CALL_PRICE

SCRIPT = """
import asyncio
from crewai import Agent, Crew, Task
from crewai.tools import BaseTool
from mcp.server.fastmcp import FastMCP
from mcp.shared.memory import create_connected_server_and_client_session
from tests.adapters.crewai.fakes import MODEL, ToolLoopLLM

server = FastMCP("facts")
received = []

@server.tool()
def lookup(query: str) -> str:
    \"\"\"Look a query up.\"\"\"
    received.append(query)
    return f"result for {query}"

class McpLookup(BaseTool):
    name: str = "lookup"
    description: str = "Look a query up."

    def _run(self, query: str) -> str:
        async def call():
            async with create_connected_server_and_client_session(server._mcp_server) as session:
                result = await session.call_tool("lookup", {"query": query})
                return str(result.content[0].text)
        return asyncio.run(call())

llm = ToolLoopLLM(model=MODEL, native=True)
agent = Agent(role="researcher", goal="find facts", backstory="thorough", llm=llm, tools=[McpLookup()])
crew = Crew(agents=[agent], tasks=[Task(description="research", expected_output="facts", agent=agent)])
try:
    crew.kickoff()
finally:
    print(llm.calls + llm.acalls, len(received))
"""


def _env(tmp_path: Path) -> dict[str, str]:
    return {"XDG_DATA_HOME": str(tmp_path / "data")}  # CrewAI writes task outputs there


@pytest.mark.parametrize(("steps", "ran"), [(6, (3, 3)), (5, (3, 2))])
def test_run_counts_an_mcp_tool_once(tmp_path: Path, steps: int, ran: tuple[int, int]) -> None:
    done, report = run_script(tmp_path, SCRIPT, ["--max-steps", str(steps)], env=_env(tmp_path))
    assert done.returncode == 3, done.stderr[-3000:]
    # model, tool, model, tool, model, tool: at 6 the 4th model call is refused, at 5 the 3rd tool.
    model_calls, tools = map(int, done.stdout.split()[-2:])
    assert (model_calls, tools) == ran
    assert (report["steps"], report["reason"]) == (steps, "step_limit") and steps == model_calls + tools


def test_run_halts_an_mcp_loop_on_cost(tmp_path: Path) -> None:
    # The fake LLM's prompt is short, so each call reserves far less than the 1000 prompt tokens it
    # reports: the 3rd call fits the reservation, its settled usage takes the run over the budget,
    # and the run halts there (a call sent is never free): its tool is refused.
    budget = 2.5 * CALL_PRICE
    flags = ["--max-cost-usd", repr(budget), "--max-output-tokens", "100"]
    done, report = run_script(tmp_path, SCRIPT, flags, env=_env(tmp_path))
    assert done.returncode == 3, done.stderr[-3000:]
    model_calls, tools = map(int, done.stdout.split()[-2:])
    assert (model_calls, tools, report["steps"]) == (3, 2, 5), report
    assert report["reason"] == "budget_exceeded" and "actual cost" in report["detail"]
    assert report["cost_usd"] == pytest.approx(3 * CALL_PRICE)
