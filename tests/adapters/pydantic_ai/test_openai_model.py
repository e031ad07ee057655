"""A real ``OpenAIChatModel`` (the OpenAI SDK over HTTP) against a fake OpenAI server on 127.0.0.1.

One step per request the server received, for plain and streamed requests, each priced from the
usage OpenAI's wire format reports, for the model the response names.
"""

from __future__ import annotations

import asyncio

import openai
import pytest
from genai_prices import Usage, calc_price
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, HaltReason
from veronica_mw.adapters.pydantic_ai import VeronicaCapability

from .fake_openai import COMPLETION_TOKENS, PROMPT_TOKENS, FakeOpenAI

PRICE = float(
    calc_price(
        Usage(input_tokens=PROMPT_TOKENS, output_tokens=COMPLETION_TOKENS), model_ref="gpt-4o"
    ).total_price
)


def openai_agent(client: openai.AsyncOpenAI) -> tuple[Agent[None, str], list[str]]:
    model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, capabilities=[VeronicaCapability()])
    ran: list[str] = []

    @agent.tool_plain
    def weather(city: str) -> str:
        ran.append(city)
        return "rain"

    return agent, ran


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("steps", [3, 6])
def test_one_step_per_request_the_server_received(streamed: bool, steps: int) -> None:
    ran: list[str] = []
    with FakeOpenAI() as server:

        async def main() -> None:
            client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
            agent, tools_ran = openai_agent(client)
            try:
                if streamed:
                    async with agent.run_stream("weather?") as stream:
                        await stream.get_output()
                else:
                    await agent.run("weather?")
            finally:
                ran.extend(tools_ran)
                await client.close()

        config = ExecutionConfig(max_cost_usd=10.0, max_steps=steps, max_retries_total=3)
        with ExecutionContext(config) as ctx, pytest.raises(ExecutionHalted) as caught:
            asyncio.run(main())
    assert caught.value.reason == HaltReason.STEP_LIMIT
    requests = len(server.requests)
    assert requests + len(ran) == steps
    assert [node.kind for node in ctx.graph.nodes()].count("llm") == requests == (steps + 1) // 2
    assert all(body.get("stream", False) is streamed for body in server.requests)
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(requests * PRICE, rel=1e-9)
    assert {node.model for node in ctx.graph.nodes() if node.kind == "llm"} == {"gpt-4o"}
