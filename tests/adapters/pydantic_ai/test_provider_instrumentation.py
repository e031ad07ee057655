"""No double count: a Pydantic AI agent on a real ``OpenAIChatModel`` while the OpenAI SDK is
instrumented too (``veronica_mw.instrument("openai", "pydantic-ai")``), against the shared fake
provider server. The capability's step for a request is offered to the SDK instrumentation
underneath, which adopts it and settles it with the usage the provider reported: one step per
request the server received, with or without an explicit ``VeronicaCapability``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import openai
import pytest
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, HaltReason
from veronica_mw.adapters.pydantic_ai import VeronicaCapability

from ...support.fake_provider import FakeProvider, cost_of


@pytest.fixture
def server() -> Iterator[FakeProvider]:
    assert set(veronica_mw.instrument("openai", "pydantic-ai")) >= {"openai", "pydantic-ai"}
    with FakeProvider() as fake:
        yield fake
    veronica_mw.uninstrument()


def never_satisfied(capability: bool, client: openai.AsyncOpenAI) -> Agent[None, str]:
    """An agent whose output validator always asks again: it sends requests until refused."""
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, capabilities=[VeronicaCapability()] if capability else [], retries=50)

    @agent.output_validator
    def again(output: str) -> str:
        raise ModelRetry("say it differently")

    return agent


@pytest.mark.parametrize("capability", [True, False], ids=["capability", "instrument-only"])
@pytest.mark.parametrize("steps", [1, 4])
def test_one_step_per_request_the_server_received(server: FakeProvider, capability: bool, steps: int) -> None:
    async def main() -> None:
        client = openai.AsyncOpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
        try:
            await never_satisfied(capability, client).run("hello")
        finally:
            await client.close()

    config = ExecutionConfig(max_cost_usd=10.0, max_steps=steps, max_retries_total=50)
    with ExecutionContext(config) as ctx, pytest.raises(ExecutionHalted) as caught:
        asyncio.run(main())
    assert type(caught.value) is ExecutionHalted and caught.value.reason == HaltReason.STEP_LIMIT
    assert server.count() == steps == ctx.get_snapshot().step_count
    nodes = ctx.graph.nodes()
    assert [(node.kind, node.status) for node in nodes] == [("llm", "ok")] * steps
    # each step priced once, from the usage the server reported for that request
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(cost_of(server.reported))


@pytest.mark.parametrize("capability", [True, False], ids=["capability", "instrument-only"])
def test_a_streamed_request_is_one_step(server: FakeProvider, capability: bool) -> None:
    async def main() -> str:
        client = openai.AsyncOpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
        model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client))
        agent = Agent(model, capabilities=[VeronicaCapability()] if capability else [])
        try:
            async with agent.run_stream("hello") as stream:
                return await stream.get_output()
        finally:
            await client.close()

    with ExecutionContext(ExecutionConfig(max_cost_usd=10.0, max_steps=5, max_retries_total=3)) as ctx:
        assert asyncio.run(main())
    assert server.count() == 1 == ctx.get_snapshot().step_count
