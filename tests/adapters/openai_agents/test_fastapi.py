"""Agents inside FastAPI requests under VeronicaASGIMiddleware (real uvicorn on 127.0.0.1): each
request's context bounds its run, and the halt becomes the middleware's HTTP 429."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from agents import Runner
from fastapi import FastAPI

import veronica_mw
from veronica_mw import ExecutionConfig
from veronica_mw.adapters.openai_agents import VeronicaRunHooks
from veronica_mw.web.asgi import VeronicaASGIMiddleware

from ...support.servers import UvicornServer
from .fakes import Counter, looping_agent

PATHS = ["/agent", "/agent-hooks", "/agent-sync", "/agent-stream"]


def build(counters: list[Counter]) -> FastAPI:
    app = FastAPI()

    def agent() -> Any:
        counter = Counter()
        counters.append(counter)
        return looping_agent(counter)  # never stops by itself: only the halt ends the run

    @app.post("/agent")  # contained by instrument(): no hooks argument at all
    async def run() -> dict[str, Any]:
        return {"answer": (await Runner.run(agent(), "go", max_turns=1000)).final_output}

    @app.post("/agent-hooks")  # explicit hooks, bound to the request's context at call time
    async def run_with_hooks() -> dict[str, Any]:
        result = await Runner.run(agent(), "go", hooks=VeronicaRunHooks(), max_turns=1000)
        return {"answer": result.final_output}

    @app.post("/agent-sync")  # a sync endpoint: FastAPI runs it in a worker thread
    def run_sync() -> dict[str, Any]:
        try:
            return {"answer": Runner.run_sync(agent(), "go", max_turns=1000).final_output}
        finally:
            # run_sync leaves the worker thread's event loop open for reuse; a test suite that
            # turns ResourceWarnings into errors must not find it unclosed later.
            asyncio.get_event_loop_policy().get_event_loop().close()

    @app.post("/agent-stream")
    async def run_streamed() -> dict[str, Any]:
        streamed = Runner.run_streamed(agent(), "go", max_turns=1000)
        events = 0
        async for _ in streamed.stream_events():
            events += 1
        return {"answer": streamed.final_output, "events": events}

    return app


@pytest.fixture(params=[4, 5], ids=["model-refused", "tool-refused"])
def served(request: pytest.FixtureRequest) -> Iterator[tuple[str, list[Counter], int]]:
    """The app under the middleware with max_steps 4 (the 5th call, a model call, is refused)
    or 5 (the 6th, a tool call, is refused)."""
    counters: list[Counter] = []
    limits = ExecutionConfig(max_cost_usd=5.0, max_steps=request.param, max_retries_total=2)
    veronica_mw.instrument("openai-agents")
    try:
        with UvicornServer(VeronicaASGIMiddleware(build(counters), config=limits)) as server:
            yield server.url, counters, request.param
    finally:
        veronica_mw.uninstrument()


def assert_step_limit_429(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["reason"] == "step_limit"


@pytest.mark.parametrize("path", PATHS)
def test_a_runaway_agent_gets_429_after_exactly_max_steps(
    served: tuple[str, list[Counter], int], path: str
) -> None:
    url, counters, steps = served
    for _ in range(2):  # each request has its own context: both get the full budget
        assert_step_limit_429(httpx.post(url + path, timeout=60))
    # model, tool, model, tool (, model): then the next call is refused.
    assert [(c.model_calls, c.tool_calls) for c in counters] == [((steps + 1) // 2, steps // 2)] * 2


def test_concurrent_requests_do_not_share_counts(served: tuple[str, list[Counter], int]) -> None:
    url, counters, steps = served
    responses: list[httpx.Response] = []

    def post(path: str) -> None:
        responses.append(httpx.post(url + path, timeout=60))

    threads = [threading.Thread(target=post, args=(path,)) for path in PATHS * 2]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)  # hang guard only
    assert len(responses) == 8
    for response in responses:
        assert_step_limit_429(response)
    assert [(c.model_calls, c.tool_calls) for c in counters] == [((steps + 1) // 2, steps // 2)] * 8
