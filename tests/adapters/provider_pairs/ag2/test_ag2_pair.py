"""AG2 1.x with its OpenAI client over the instrumented OpenAI SDK: the AG2 middleware's step and the
SDK request are one step (steps == requests the fake server received)."""

from __future__ import annotations

import pytest
from ag2 import Agent
from ag2.config import OpenAIConfig

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters.ag2 import VeronicaMiddleware

from ....support.fake_provider import FakeProvider


@pytest.mark.anyio
async def test_agent_turns_are_one_step_per_request(server: FakeProvider, sdks: None) -> None:
    config = OpenAIConfig(model="gpt-4o-mini", base_url=server.openai_url, api_key="test", max_retries=0)
    agent = Agent("writer", config=config, middleware=[VeronicaMiddleware()])
    async with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=2, max_retries_total=0)) as ctx:
        await agent.ask("first")
        await agent.ask("second")
        with pytest.raises(ExecutionHalted):
            await agent.ask("third")
    snap = ctx.get_snapshot()
    assert server.count() == 2 == snap.step_count
    assert snap.cost_usd_accumulated > 0


@pytest.mark.anyio
async def test_without_the_middleware_the_sdk_layer_counts(server: FakeProvider, sdks: None) -> None:
    config = OpenAIConfig(model="gpt-4o-mini", base_url=server.openai_url, api_key="test", max_retries=0)
    agent = Agent("writer", config=config)
    async with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=1, max_retries_total=0)) as ctx:
        await agent.ask("first")
        with pytest.raises(ExecutionHalted):
            await agent.ask("second")
    assert server.count() == 1 == ctx.get_snapshot().step_count
