"""Pydantic AI agents inside FastAPI endpoints under the ASGI middleware: the halt becomes a 429.

A real uvicorn on 127.0.0.1 and a real HTTP client. The agent carries ``VeronicaCapability()``
with no context of its own, so each request's context (built by the middleware) bounds it; the
same agent serves every request, each with its full budget.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

import veronica_mw
from veronica_mw import ExecutionConfig
from veronica_mw.adapters.pydantic_ai import VeronicaCapability
from veronica_mw.web.asgi import VeronicaASGIMiddleware

from ...support.servers import UvicornServer
from .conftest import close_run_sync_loop
from .fakes import Runaway

LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=3)


def build_app(instrumented: bool) -> tuple[FastAPI, Runaway]:
    fake = Runaway()
    agent = fake.agent([] if instrumented else [VeronicaCapability()])
    app = FastAPI()

    @app.post("/agent")
    async def run_async() -> dict[str, str]:
        return {"output": (await agent.run("weather?")).output}

    @app.post("/agent-sync")
    def run_sync() -> dict[str, str]:  # FastAPI runs it in its threadpool
        try:
            return {"output": agent.run_sync("weather?").output}
        finally:
            close_run_sync_loop()

    @app.post("/agent-stream")
    async def run_stream() -> dict[str, str]:
        async with agent.run_stream("weather?") as stream:
            return {"output": await stream.get_output()}

    @app.get("/agent-events")
    async def events() -> StreamingResponse:
        async def lines() -> Any:
            async with agent.run_stream_events("weather?") as stream:
                async for event in stream:
                    yield f"{type(event).__name__}\n"

        return StreamingResponse(lines(), media_type="text/plain")

    return app, fake


@pytest.fixture(params=[False, True], ids=["capability", "instrument"])
def served(request: pytest.FixtureRequest) -> Iterator[tuple[str, Runaway]]:
    if request.param:
        veronica_mw.instrument("pydantic-ai")
    app, fake = build_app(instrumented=request.param)
    with UvicornServer(VeronicaASGIMiddleware(app, config=LIMITS)) as server:
        yield server.url, fake


def assert_step_limit_429(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["reason"] == "step_limit"


@pytest.mark.parametrize("path", ["/agent", "/agent-sync", "/agent-stream"])
def test_an_agent_past_its_limit_answers_429(served: tuple[str, Runaway], path: str) -> None:
    url, fake = served
    for request in range(1, 3):  # each request has its own context: both get the full budget
        assert_step_limit_429(httpx.post(url + path, timeout=60))
        # model, tool, model, tool, model: the third tool call is refused
        assert (fake.model_calls, fake.tool_calls) == (3 * request, 2 * request)


def test_concurrent_requests_each_get_their_own_budget(served: tuple[str, Runaway]) -> None:
    url, fake = served

    async def main() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as client:
            return list(await asyncio.gather(*(client.post(url + "/agent") for _ in range(6))))

    for response in asyncio.run(main()):
        assert_step_limit_429(response)
    assert (fake.model_calls, fake.tool_calls) == (18, 12)


def test_a_streamed_event_response_ends_cleanly_at_the_limit(served: tuple[str, Runaway]) -> None:
    url, fake = served
    response = httpx.get(url + "/agent-events", timeout=60)
    # the response had started streaming: the middleware ends it cleanly instead of a 429
    assert response.status_code == 200
    assert fake.executions == 5
