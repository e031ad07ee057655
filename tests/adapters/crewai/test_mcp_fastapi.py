"""CrewAI + MCP inside concurrent FastAPI requests under VeronicaASGIMiddleware (real uvicorn, a
CrewAI tool calling a real in-process MCP server): each request halts at exactly its own
max_steps with the 429 problem+json, and the model + MCP tool run exactly max_steps x requests
operations in total."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from crewai import Agent, Crew, Task
from crewai.crews.crew_output import CrewOutput
from crewai.tools import BaseTool
from fastapi import FastAPI
from mcp.server.fastmcp import FastMCP
from mcp.shared.memory import create_connected_server_and_client_session

import veronica_mw
from veronica_mw import ExecutionConfig
from veronica_mw.web.asgi import VeronicaASGIMiddleware

from ...support.servers import UvicornServer
from .fakes import MODEL, ToolLoopLLM
from .test_crewai_fastapi import assert_step_limit_429

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai")

STEPS = 5  # model, tool, model, tool, model: the 3rd tool run is refused
REQUESTS = 8
SERVER = FastMCP("facts")
RECEIVED: list[str] = []
_received_lock = threading.Lock()


@SERVER.tool()
def lookup(query: str) -> str:
    """Look a query up."""
    with _received_lock:
        RECEIVED.append(query)
    return f"result for {query}"


class McpLookup(BaseTool):
    name: str = "lookup"
    description: str = "Look a query up."

    def _run(self, query: str) -> str:
        async def call() -> str:
            async with create_connected_server_and_client_session(SERVER._mcp_server) as session:
                result = await session.call_tool("lookup", {"query": query})
                return str(result.content[0].text)  # type: ignore[union-attr]

        return asyncio.run(call())


def build(llms: list[ToolLoopLLM]) -> FastAPI:
    app = FastAPI()

    @app.post("/crew")  # sync: FastAPI runs it in its threadpool, concurrently
    def run() -> dict[str, Any]:
        llm = ToolLoopLLM(model=MODEL, native=True)  # asks for lookup on every call
        llms.append(llm)
        agent = Agent(
            role="researcher", goal="find facts", backstory="thorough", llm=llm, tools=[McpLookup()]
        )
        task = Task(description="research", expected_output="facts", agent=agent)
        output = Crew(agents=[agent], tasks=[task]).kickoff()
        assert isinstance(output, CrewOutput)
        return {"raw": output.raw}

    return app


@pytest.fixture
def served() -> Iterator[tuple[str, list[ToolLoopLLM]]]:
    RECEIVED.clear()
    llms: list[ToolLoopLLM] = []
    assert {"crewai", "mcp"} <= set(veronica_mw.instrument())
    limits = ExecutionConfig(max_cost_usd=100.0, max_steps=STEPS, max_retries_total=0)
    try:
        with UvicornServer(VeronicaASGIMiddleware(build(llms), config=limits)) as server:
            yield server.url, llms
    finally:
        veronica_mw.uninstrument()


def test_concurrent_requests_each_stop_at_their_limit(served: tuple[str, list[ToolLoopLLM]]) -> None:
    url, llms = served
    responses: list[httpx.Response] = []

    def post() -> None:
        responses.append(httpx.post(url + "/crew", timeout=120))

    threads = [threading.Thread(target=post) for _ in range(REQUESTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(240)  # hang guard only
    assert len(responses) == REQUESTS
    for response in responses:
        assert_step_limit_429(response)
    model_calls = sum(llm.calls + llm.acalls for llm in llms)
    assert (len(llms), model_calls, len(RECEIVED)) == (REQUESTS, 3 * REQUESTS, 2 * REQUESTS)
    assert model_calls + len(RECEIVED) == STEPS * REQUESTS
