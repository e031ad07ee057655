"""Pydantic AI's ``OpenAIChatModel`` over the instrumented OpenAI SDK, in concurrent FastAPI requests
under VeronicaASGIMiddleware (real uvicorn): the Pydantic AI adapter and the SDK instrumentation
both see every model request and count it once, so each request gets its 429 at exactly its own
``max_steps`` and the fake provider receives exactly the requests those steps allow."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from fastapi import FastAPI
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from ...support.concurrent_requests import assert_step_limit_refusals, post_all, tool_loop_server
from ...support.fake_tool_provider import FakeToolProvider

STEPS = 5  # model, tool, model, tool, model: the 3rd tool run is refused
REQUESTS = 8


def build(url: str, ran: list[str]) -> FastAPI:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="test", max_retries=0)
    # The fake provider answers every request that offers tools with a send_email call: a runaway.
    agent = Agent(OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client)))

    @agent.tool_plain
    def send_email(to: str, body: str) -> str:
        """Send an e-mail."""
        ran.append(to)
        return "sent"

    app = FastAPI()

    @app.post("/agent")
    async def run() -> dict[str, Any]:
        return {"output": (await agent.run("mail ops")).output}

    return app


@pytest.fixture
def served() -> Iterator[tuple[str, FakeToolProvider, list[str]]]:
    with tool_loop_server(build, STEPS, {"pydantic-ai", "openai"}) as served:
        yield served


def test_concurrent_requests_each_stop_at_their_limit(
    served: tuple[str, FakeToolProvider, list[str]],
) -> None:
    url, provider, ran = served
    assert_step_limit_refusals(post_all(url + "/agent", REQUESTS), STEPS)
    requests = provider.paths.count("/v1/chat/completions")
    # Counted twice (the adapter's step and the SDK's), 5 steps would allow fewer requests and tools.
    assert (requests, len(ran)) == (3 * REQUESTS, 2 * REQUESTS)
    assert requests + len(ran) == STEPS * REQUESTS
