"""Local tools other than plain function tools are steps too: the SDK's local shell tool (its hooks
get the run's context, not a per-call ToolContext) and tools of a real MCP server over stdio."""

from __future__ import annotations

import asyncio
import itertools
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, LocalShellTool, Runner
from agents.mcp import MCPServerStdio, MCPServerStdioParams
from openai.types.responses import ResponseOutputItem
from openai.types.responses.response_output_item import LocalShellCall, LocalShellCallAction

from veronica_mw import ExecutionContext, ExecutionHalted
from veronica_mw.adapters.openai_agents import VeronicaRunHooks

from .fakes import Counter, ToolLoopModel
from .test_hooks import drive, limits

SERVER = Path(__file__).with_name("mcp_ping_server.py")
_ids = itertools.count(1)


class ShellLoopModel(ToolLoopModel):
    """Asks for ``parallel`` local shell commands on every turn."""

    def _output(self) -> list[ResponseOutputItem]:
        self.calls += 1
        self.counter.model_calls += 1
        calls: list[ResponseOutputItem] = []
        for _ in range(self.parallel):
            n = next(_ids)
            action = LocalShellCallAction(type="exec", command=["echo", "hi"], env={})
            calls.append(
                LocalShellCall(
                    type="local_shell_call",
                    id=f"ls_{n}",
                    call_id=f"lsc_{n}",
                    status="completed",
                    action=action,
                )
            )
        return calls


@pytest.mark.parametrize(("parallel", "steps"), [(1, 4), (1, 3), (3, 8), (3, 6)])
def test_local_shell_calls_are_steps_refused_before_they_run(parallel: int, steps: int) -> None:
    counter = Counter()

    def executor(request: Any) -> str:
        counter.tool_calls += 1
        return "hi"

    agent = Agent(
        name="sh", model=ShellLoopModel(counter, parallel=parallel), tools=[LocalShellTool(executor=executor)]
    )
    ctx = ExecutionContext(limits(steps))
    with pytest.raises(ExecutionHalted):
        drive("run", agent, hooks=VeronicaRunHooks(ctx))
    snap = ctx.get_snapshot()
    assert snap.step_count == steps and snap.in_flight == 0
    assert counter.model_calls == 2
    if steps == 2 * parallel + 2:  # refused at the third model call: every admitted command ran
        assert counter.tool_calls == 2 * parallel
    else:  # refused inside a batch of parallel commands: siblings may be cut short, never uncounted
        assert counter.tool_calls <= steps - 2


def test_mcp_server_tools_are_steps_refused_before_the_server_sees_them(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    log.touch()
    counter = Counter()
    ctx = ExecutionContext(limits(5))

    async def main() -> None:
        params = MCPServerStdioParams(command=sys.executable, args=[str(SERVER), str(log)])
        async with MCPServerStdio(params=params, client_session_timeout_seconds=60) as server:
            agent = Agent(name="mcp", model=ToolLoopModel(counter), mcp_servers=[server])
            with pytest.raises(ExecutionHalted):
                await Runner.run(agent, "go", hooks=VeronicaRunHooks(ctx), max_turns=1000)

    asyncio.run(main())
    # model, ping, model, ping, model: the third ping is refused and never reaches the server.
    assert log.read_text().count("ping") == 2 and counter.model_calls == 3
    assert [n.name for n in ctx.graph.nodes()][1] == "openai_agents.tool:ping"
