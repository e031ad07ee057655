"""LangChain + MCP (``langchain-mcp-adapters``) inside concurrent FastAPI requests under
VeronicaASGIMiddleware (real uvicorn, a real in-process MCP server per request): each request
halts at exactly its own max_steps with the 429 problem+json, and the model + MCP tool run
exactly max_steps x requests operations in total."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from langchain.agents import create_agent
from langchain_mcp_adapters.tools import load_mcp_tools
from mcp.server.fastmcp import FastMCP
from mcp.shared.memory import create_connected_server_and_client_session

import veronica_mw
from veronica_mw.web.asgi import VeronicaASGIMiddleware

from ...support.servers import UvicornServer
from .test_agent_middleware import START, AlwaysToolModel, limits

STEPS = 5  # model, tool, model, tool, model: the 3rd tool run is refused
REQUESTS = 8


def build(models: list[AlwaysToolModel], received: list[str]) -> FastAPI:
    mcp_app = FastMCP("weather")

    @mcp_app.tool()
    def lookup(city: str) -> str:
        """Look up the weather in a city."""
        received.append(city)
        return f"sunny in {city}"

    app = FastAPI()

    @app.post("/agent")
    async def run() -> dict[str, Any]:
        model = AlwaysToolModel()  # asks for lookup on every call
        models.append(model)
        async with create_connected_server_and_client_session(mcp_app._mcp_server) as session:
            agent = create_agent(model, tools=await load_mcp_tools(session))
            result = await agent.ainvoke(START)
        return {"messages": len(result["messages"])}

    return app


@pytest.fixture
def served() -> Iterator[tuple[str, list[AlwaysToolModel], list[str]]]:
    models: list[AlwaysToolModel] = []
    received: list[str] = []
    assert {"langchain", "mcp"} <= set(veronica_mw.instrument())
    try:
        app = VeronicaASGIMiddleware(build(models, received), config=limits(max_steps=STEPS))
        with UvicornServer(app) as server:
            yield server.url, models, received
    finally:
        veronica_mw.uninstrument()


def test_concurrent_requests_each_stop_at_their_limit(
    served: tuple[str, list[AlwaysToolModel], list[str]],
) -> None:
    url, models, received = served
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
    model_calls = sum(m.calls for m in models)
    assert (len(models), model_calls, len(received)) == (REQUESTS, 3 * REQUESTS, 2 * REQUESTS)
    assert model_calls + len(received) == STEPS * REQUESTS
