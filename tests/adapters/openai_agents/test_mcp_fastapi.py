"""Agents SDK + MCP inside concurrent FastAPI requests under VeronicaASGIMiddleware (real uvicorn,
a real MCP server over stdio per request): each request halts at exactly its own max_steps with
the 429 problem+json, and the model + MCP tool run exactly max_steps x requests operations."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import Agent, Runner
from agents.mcp import MCPServerStdio, MCPServerStdioParams
from fastapi import FastAPI

import veronica_mw
from veronica_mw import ExecutionConfig
from veronica_mw.web.asgi import VeronicaASGIMiddleware

from ...support.servers import UvicornServer
from .fakes import Counter, ToolLoopModel
from .test_fastapi import assert_step_limit_429

MCP_SERVER = Path(__file__).with_name("mcp_ping_server.py")
STEPS = 5  # model, ping, model, ping, model: the 3rd ping is refused
REQUESTS = 8


def build(counter: Counter, log: Path) -> FastAPI:
    app = FastAPI()

    @app.post("/agent")
    async def run() -> dict[str, Any]:
        params = MCPServerStdioParams(command=sys.executable, args=[str(MCP_SERVER), str(log)])
        async with MCPServerStdio(params=params, client_session_timeout_seconds=60) as server:
            agent = Agent(name="mcp", model=ToolLoopModel(counter), mcp_servers=[server])
            return {"answer": (await Runner.run(agent, "go", max_turns=1000)).final_output}

    return app


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Counter, Path]]:
    counter = Counter()
    log = tmp_path / "calls.log"
    log.touch()
    limits = ExecutionConfig(max_cost_usd=100.0, max_steps=STEPS, max_retries_total=0)
    veronica_mw.instrument("openai-agents", "mcp")
    try:
        with UvicornServer(VeronicaASGIMiddleware(build(counter, log), config=limits)) as server:
            yield server.url, counter, log
    finally:
        veronica_mw.uninstrument()


def test_concurrent_requests_each_stop_at_their_limit(served: tuple[str, Counter, Path]) -> None:
    url, counter, log = served
    responses: list[httpx.Response] = []

    def post() -> None:
        responses.append(httpx.post(url + "/agent", timeout=120))

    threads = [threading.Thread(target=post) for _ in range(REQUESTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(240)  # hang guard only
    assert len(responses) == REQUESTS
    for response in responses:
        assert_step_limit_429(response)
    pings = log.read_text().count("ping")
    assert (counter.model_calls, pings) == (3 * REQUESTS, 2 * REQUESTS)
    assert counter.model_calls + pings == STEPS * REQUESTS
