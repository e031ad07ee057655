"""Agents SDK + MCP instrumentation: an MCP server tool run by an agent is one step, not two.

The run hooks begin a step in ``on_tool_start`` and the MCP instrumentation sees the same call as
``tools/call``: the latter joins the former, so steps == model calls + tool calls and
``max_steps=N`` lets exactly N operations run. A real MCP server over stdio logs each call.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from agents import Agent, Runner
from agents.mcp import MCPServerStdio, MCPServerStdioParams

import veronica_mw
from veronica_mw import ExecutionContext, ExecutionHalted

from .fakes import Counter, ToolLoopModel
from .test_hooks import limits

SERVER = Path(__file__).with_name("mcp_ping_server.py")


def _run(ctx: ExecutionContext, log: Path, counter: Counter, parallel: int) -> None:
    async def main() -> None:
        params = MCPServerStdioParams(command=sys.executable, args=[str(SERVER), str(log)])
        async with MCPServerStdio(params=params, client_session_timeout_seconds=60) as server:
            model = ToolLoopModel(counter, parallel=parallel)
            agent = Agent(name="mcp", model=model, mcp_servers=[server])
            async with ctx:
                with pytest.raises(ExecutionHalted):
                    await Runner.run(agent, "go", max_turns=1000)

    asyncio.run(main())


@pytest.mark.parametrize(("parallel", "steps"), [(1, 6), (2, 6)])
def test_an_mcp_tool_is_one_step_under_instrument(tmp_path: Path, parallel: int, steps: int) -> None:
    log = tmp_path / "calls.log"
    log.touch()
    counter = Counter()
    assert veronica_mw.instrument("openai-agents", "mcp") == ("openai-agents", "mcp")
    ctx = ExecutionContext(limits(steps))
    try:
        _run(ctx, log, counter, parallel)
    finally:
        veronica_mw.uninstrument()
    pings = log.read_text().count("ping")
    snap = ctx.get_snapshot()
    # parallel=1: model, ping, model, ping, model, ping; the 4th model call is refused.
    # parallel=2: model, ping x2, model, ping x2; the 3rd model call is refused.
    assert snap.step_count == steps == counter.model_calls + pings
    assert (counter.model_calls, pings) == ((3, 3) if parallel == 1 else (2, 4))
    tools = [n for n in ctx.graph.nodes() if n.kind == "tool"]
    assert len(tools) == pings and all(n.name == "openai_agents.tool:ping" for n in tools)
    assert all(n.settled and n.status == "ok" for n in tools)
