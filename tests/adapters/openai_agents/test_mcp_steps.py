"""Agents SDK + MCP instrumentation: an MCP server tool run by an agent is one step, not two.

The run hooks begin a step in ``on_tool_start`` and the MCP instrumentation sees the same call as
``tools/call``: the latter joins the former, so steps == model calls + tool calls and
``max_steps=N`` lets exactly N operations run. A real MCP server over stdio logs each call.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunHooks, Runner
from agents.mcp import MCPServerStdio, MCPServerStdioParams

import veronica_mw
from veronica_mw import ExecutionContext, ExecutionHalted
from veronica_mw.adapters.openai_agents import VeronicaRunHooks

from .fakes import Counter, ToolLoopModel
from .test_hooks import limits

SERVER = Path(__file__).with_name("mcp_ping_server.py")


def _run(
    ctx: ExecutionContext, log: Path, counter: Counter, parallel: int, hooks: RunHooks[Any] | None = None
) -> None:
    async def main() -> None:
        params = MCPServerStdioParams(command=sys.executable, args=[str(SERVER), str(log)])
        async with MCPServerStdio(params=params, client_session_timeout_seconds=60) as server:
            model = ToolLoopModel(counter, parallel=parallel)
            agent = Agent(name="mcp", model=model, mcp_servers=[server])
            async with ctx:
                with pytest.raises(ExecutionHalted):
                    await Runner.run(agent, "go", max_turns=1000, hooks=hooks)

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


@pytest.mark.parametrize("parallel", [1, 2])
def test_explicit_hooks_with_only_mcp_instrumented_count_once(tmp_path: Path, parallel: int) -> None:
    """No ``instrument("openai-agents")``: the hooks themselves put the MCP join in place."""
    log = tmp_path / "calls.log"
    log.touch()
    counter = Counter()
    assert veronica_mw.instrument("mcp") == ("mcp",)
    ctx = ExecutionContext(limits(6))
    try:
        _run(ctx, log, counter, parallel, hooks=VeronicaRunHooks())
    finally:
        veronica_mw.uninstrument()
    pings = log.read_text().count("ping")
    assert ctx.get_snapshot().step_count == 6 == counter.model_calls + pings
    assert (counter.model_calls, pings) == ((3, 3) if parallel == 1 else (2, 4))
    tools = [n for n in ctx.graph.nodes() if n.kind == "tool"]
    assert len(tools) == pings and all(n.name == "openai_agents.tool:ping" for n in tools)


SCRIPT = """
import asyncio, sys
from pathlib import Path
from agents import Agent, Runner, set_tracing_disabled
from agents.mcp import MCPServerStdio, MCPServerStdioParams
from tests.adapters.openai_agents.fakes import Counter, ToolLoopModel

set_tracing_disabled(True)
server_script, log = sys.argv[1], sys.argv[2]
counter = Counter()

async def main():
    params = MCPServerStdioParams(command=sys.executable, args=[server_script, log])
    async with MCPServerStdio(params=params, client_session_timeout_seconds=60) as server:
        agent = Agent(name="mcp", model=ToolLoopModel(counter), mcp_servers=[server])
        await Runner.run(agent, "go", max_turns=1000)

try:
    asyncio.run(main())
finally:
    print(counter.model_calls)
"""


def test_veronica_mw_run_counts_an_mcp_tool_once(tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text(SCRIPT)
    log = tmp_path / "calls.log"
    log.touch()
    root = str(Path(__file__).resolve().parents[3])
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "veronica_mw.cli",
            "run",
            "--json",
            "--max-steps",
            "6",
            str(script),
            str(SERVER),
            str(log),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": root, "OPENAI_AGENTS_DISABLE_TRACING": "1"},
    )
    assert done.returncode == 3, done.stderr[-3000:]
    # model, ping, model, ping, model, ping: the 4th model call is refused.
    assert done.stdout.split()[-1:] == ["3"] and log.read_text().count("ping") == 3
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert (report["steps"], report["reason"]) == (6, "step_limit")


def _wrapped() -> bool:
    from agents.mcp.util import MCPUtil

    return hasattr(MCPUtil.__dict__["invoke_mcp_tool"].__func__, "__wrapped__")


def test_uninstrument_removes_the_join_of_explicit_hooks(tmp_path: Path) -> None:
    from veronica_mw.adapters import _openai_agents_mcp, _provider_claims

    veronica_mw.instrument("mcp")
    hooks = VeronicaRunHooks()  # pins the join for as long as the process has such hooks
    assert _wrapped() and _openai_agents_mcp.enclosing_tool in _provider_claims._finders
    veronica_mw.uninstrument()
    # Every patch is gone: the SDK's MCP tool body and the finder too, not only the MCP session.
    assert not _wrapped() and _openai_agents_mcp.enclosing_tool not in _provider_claims._finders
    # Instrumented again, the hooks built earlier count an MCP tool once again.
    log = tmp_path / "calls.log"
    log.touch()
    counter = Counter()
    veronica_mw.instrument("mcp")
    assert _wrapped()
    ctx = ExecutionContext(limits(6))
    try:
        _run(ctx, log, counter, 1, hooks=hooks)
    finally:
        veronica_mw.uninstrument()
    assert ctx.get_snapshot().step_count == 6 == counter.model_calls + log.read_text().count("ping")
    assert not _wrapped()
