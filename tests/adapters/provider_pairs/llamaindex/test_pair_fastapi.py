"""LlamaIndex's ``OpenAI`` LLM over the instrumented OpenAI SDK, in a LlamaIndex ``FunctionAgent``
inside concurrent FastAPI requests under VeronicaASGIMiddleware (real uvicorn): the LlamaIndex
handler and the SDK instrumentation both see every model request and count it once, so each
request gets its 429 at exactly its own ``max_steps`` and the fake provider receives exactly the
requests those steps allow."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.llms.openai import OpenAI as LlamaOpenAI

from ....support.concurrent_requests import assert_step_limit_refusals, post_all, tool_loop_server
from ....support.fake_tool_provider import FakeToolProvider

# LlamaIndex's workflows read pydantic's deprecated attributes (its own warnings, not ours).
pytestmark = [
    pytest.mark.filterwarnings("ignore:The `__fields__` attribute is deprecated"),
    pytest.mark.filterwarnings("ignore:The `__fields_set__` attribute is deprecated"),
    pytest.mark.filterwarnings("ignore:Accessing the 'model_(computed_)?fields' attribute on the instance"),
]

STEPS = 5  # model, tool, model, tool, model: the 3rd tool run is refused
REQUESTS = 8


def build(url: str, ran: list[str]) -> FastAPI:
    def send_email(to: str, body: str) -> str:
        """Send an e-mail."""
        ran.append(to)
        return "sent"

    app = FastAPI()

    @app.post("/agent")
    async def run() -> dict[str, Any]:
        # The fake provider answers every request that offers tools with a send_email call: a runaway.
        llm = LlamaOpenAI(model="gpt-4o-mini", api_base=url + "/v1", api_key="test", max_retries=0)
        agent = FunctionAgent(tools=[send_email], llm=llm, streaming=False)
        return {"output": str(await agent.run("mail ops"))}

    return app


@pytest.fixture
def served() -> Iterator[tuple[str, FakeToolProvider, list[str]]]:
    with tool_loop_server(build, STEPS, {"llamaindex", "openai"}) as served:
        yield served


def test_concurrent_requests_each_stop_at_their_limit(
    served: tuple[str, FakeToolProvider, list[str]],
) -> None:
    url, provider, ran = served
    assert_step_limit_refusals(post_all(url + "/agent", REQUESTS), STEPS)
    requests = provider.paths.count("/v1/chat/completions")
    # Counted twice (the handler's step and the SDK's), 5 steps would allow fewer requests and tools.
    assert (requests, len(ran)) == (3 * REQUESTS, 2 * REQUESTS)
    assert requests + len(ran) == STEPS * REQUESTS
