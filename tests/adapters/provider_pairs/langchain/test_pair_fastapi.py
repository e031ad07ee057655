"""LangChain's ``ChatOpenAI`` over the instrumented OpenAI SDK, in a LangChain agent inside concurrent
FastAPI requests under VeronicaASGIMiddleware (real uvicorn): both layers see every model call and
count it once, so each request gets its 429 at exactly its own ``max_steps``, and the fake provider
receives exactly the model requests those steps allow (operations == max_steps x requests)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from ....support.concurrent_requests import assert_step_limit_refusals, post_all, tool_loop_server
from ....support.fake_tool_provider import FakeToolProvider

STEPS = 5  # model, tool, model, tool, model: the 3rd tool run is refused
REQUESTS = 8


def build(url: str, ran: list[str]) -> FastAPI:
    @tool
    def send_email(to: str, body: str) -> str:
        """Send an e-mail."""
        ran.append(to)
        return "sent"

    app = FastAPI()

    @app.post("/agent")
    async def run() -> dict[str, Any]:
        # The fake provider answers every request that offers tools with a send_email call: a runaway.
        model = ChatOpenAI(
            model="gpt-4o-mini", base_url=url + "/v1", api_key=SecretStr("test"), max_retries=0
        )
        agent = create_agent(model, tools=[send_email])
        result = await agent.ainvoke({"messages": [{"role": "user", "content": "mail ops"}]})
        return {"messages": len(result["messages"])}

    return app


@pytest.fixture
def served() -> Iterator[tuple[str, FakeToolProvider, list[str]]]:
    with tool_loop_server(build, STEPS, {"langchain", "openai"}) as served:
        yield served


def test_concurrent_requests_each_stop_at_their_limit(
    served: tuple[str, FakeToolProvider, list[str]],
) -> None:
    url, provider, ran = served
    assert_step_limit_refusals(post_all(url + "/agent", REQUESTS), STEPS)
    requests = provider.paths.count("/v1/chat/completions")
    # Counted twice (the LangChain handler and the SDK each opening a step), 5 steps would allow only
    # 2 or 3 model requests and fewer tool runs per request.
    assert (requests, len(ran)) == (3 * REQUESTS, 2 * REQUESTS)
    assert requests + len(ran) == STEPS * REQUESTS
