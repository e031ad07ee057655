"""Pydantic AI + MCP inside concurrent FastAPI requests under VeronicaASGIMiddleware (real
uvicorn, a FastMCP server's tool through ``MCPToolset``): each request halts at exactly its own
max_steps with the 429 problem+json, and the model + MCP tool run exactly max_steps x requests
operations in total."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import fastmcp
import httpx
import pytest
from fastapi import FastAPI
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset

import veronica_mw
from veronica_mw import ExecutionConfig
from veronica_mw.web.asgi import VeronicaASGIMiddleware

from ...support.servers import UvicornServer
from .fakes import Runaway

STEPS = 5  # model, tool, model, tool, model: the 3rd tool run is refused
REQUESTS = 8


def build(runaway: Runaway, received: list[str]) -> FastAPI:
    server = fastmcp.FastMCP("weather")

    @server.tool
    def weather(city: str) -> str:
        """Current weather in a city."""
        received.append(city)
        return f"rain in {city}"

    app = FastAPI()

    @app.post("/agent")
    async def run() -> dict[str, Any]:
        agent = Agent(runaway.model, toolsets=[MCPToolset(server)])  # asks for weather every turn
        return {"output": (await agent.run("weather?")).output}

    return app


@pytest.fixture
def served() -> Iterator[tuple[str, Runaway, list[str]]]:
    runaway = Runaway()
    received: list[str] = []
    limits = ExecutionConfig(max_cost_usd=100.0, max_steps=STEPS, max_retries_total=0)
    assert {"pydantic-ai", "mcp"} <= set(veronica_mw.instrument())
    try:
        with UvicornServer(VeronicaASGIMiddleware(build(runaway, received), config=limits)) as server:
            yield server.url, runaway, received
    finally:
        veronica_mw.uninstrument()


def test_concurrent_requests_each_stop_at_their_limit(
    served: tuple[str, Runaway, list[str]],
) -> None:
    url, runaway, received = served
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
        assert response.status_code == 429, response.text
        assert response.headers["content-type"].startswith("application/problem+json")
        assert response.json()["reason"] == "step_limit"
    assert (runaway.model_calls, len(received)) == (3 * REQUESTS, 2 * REQUESTS)
    assert runaway.model_calls + len(received) == STEPS * REQUESTS
