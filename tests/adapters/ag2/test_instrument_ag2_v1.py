"""``veronica_mw.instrument()`` and ``veronica-mw run`` contain AG2 1.x agents given no middleware:
tool runs are steps admitted before they run (in process, under the CLI, under the ASGI middleware)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ag2 import Agent
from fastapi import FastAPI

import veronica_mw
from veronica_mw import ExecutionContext, ExecutionHalted
from veronica_mw.adapters.ag2 import VeronicaMiddleware
from veronica_mw.web.asgi import VeronicaASGIMiddleware

from .test_ag2_v1 import always_calls_tool, limits, lookup_tool


@pytest.fixture(autouse=True)
def instrumented() -> Iterator[None]:
    assert "ag2" in veronica_mw.instrument("ag2")
    yield
    veronica_mw.uninstrument()


@pytest.mark.anyio
async def test_tool_runs_are_steps_without_any_middleware() -> None:
    runs: list[str] = []
    model = always_calls_tool()
    agent = Agent("researcher", config=model, tools=[lookup_tool(runs)])
    async with ExecutionContext(limits(6)) as ctx:
        with pytest.raises(ExecutionHalted):
            await agent.ask("Find x.")
    # model, tool, model, tool, model, tool: the 4th model call is refused before it is made.
    assert (model.mock.call_count, len(runs)) == (3, 3)
    assert ctx.get_snapshot().step_count == 6


@pytest.mark.anyio
async def test_an_agent_with_its_own_middleware_is_counted_once() -> None:
    runs: list[str] = []
    model = always_calls_tool()
    agent = Agent("researcher", config=model, tools=[lookup_tool(runs)], middleware=[VeronicaMiddleware()])
    async with ExecutionContext(limits(5)) as ctx:
        with pytest.raises(ExecutionHalted):
            await agent.ask("Find x.")
    assert (model.mock.call_count, len(runs), ctx.get_snapshot().step_count) == (3, 2, 5)


@pytest.mark.anyio
async def test_outside_any_context_nothing_changes() -> None:
    model = always_calls_tool(turns=3)
    runs: list[str] = []
    agent = Agent("researcher", config=model, tools=[lookup_tool(runs)])
    with pytest.raises(Exception):  # noqa: B017 - the scripted model runs out of replies
        await agent.ask("Find x.")
    assert len(runs) == 3


def test_requests_under_the_asgi_middleware_halt_at_exactly_their_limit(serve: Callable[[Any], str]) -> None:
    runs: list[str] = []
    model = always_calls_tool(turns=200)
    agent = Agent("researcher", config=model, tools=[lookup_tool(runs)])
    app = FastAPI()

    @app.post("/research")
    async def research() -> dict[str, Any]:
        reply = await agent.ask("Find x.")  # the model never stops calling the tool
        return {"answer": str(reply.body)}

    app.add_middleware(VeronicaASGIMiddleware, config=limits(5))

    async def many() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=serve(app), timeout=30.0) as client:
            return list(await asyncio.gather(*(client.post("/research") for _ in range(4))))

    for response in asyncio.run(many()):
        assert response.status_code == 429
        assert (response.json()["reason"], response.json()["steps_used"]) == ("step_limit", 5)
    assert (model.mock.call_count, len(runs)) == (12, 8)  # 3 model calls and 2 tool runs per request


SCRIPT = """
import asyncio
from ag2 import Agent, tool
from ag2.events import ToolCallEvent
from ag2.testing import TestConfig, TrackingConfig

RUNS = []

@tool
def lookup(q: str) -> str:
    \"\"\"Look something up.\"\"\"
    RUNS.append(q)
    return "found"

model = TrackingConfig(TestConfig(*[ToolCallEvent("lookup", arguments='{"q": "x"}') for _ in range(50)]))
agent = Agent("researcher", config=model, tools=[lookup])
try:
    asyncio.run(agent.ask("Find x."))
finally:
    print(model.mock.call_count, len(RUNS))
"""


def test_veronica_mw_run_counts_the_same(tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text(textwrap.dedent(SCRIPT))
    done = subprocess.run(
        [sys.executable, "-m", "veronica_mw.cli", "run", "--json", "--max-steps", "6", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ.copy(),
    )
    assert done.returncode == 3, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["3", "3"], done.stdout[-2000:]  # 3 model calls, 3 tool runs
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert (report["steps"], report["reason"]) == (6, "step_limit")
