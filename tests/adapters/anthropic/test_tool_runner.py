"""``client.beta.messages.tool_runner(...)``: the SDK's own tool loop is bounded -- each tool run is
a step admitted before it runs, each request a step, and a refusal ends the loop with the halt.
Against a fake server that always asks for another tool call (a runaway)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from anthropic import beta_async_tool, beta_tool

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, HaltReason

from ...support.fake_bare import BareProvider

MODEL = "claude-haiku-4-5"
MESSAGES: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=6, max_retries_total=0)
ran: list[str] = []


@beta_tool
def get_weather(city: str, unit: str = "celsius", days: int = 1) -> str:
    """The weather in a city."""
    ran.append(city)
    return "rain"


@beta_async_tool
async def get_weather_async(city: str, unit: str = "celsius", days: int = 1) -> str:
    """The weather in a city."""
    ran.append(city)
    return "rain"


get_weather_async.name = "get_weather"


@pytest.fixture
def bare() -> Iterator[BareProvider]:
    ran.clear()
    veronica_mw.instrument("anthropic")
    with BareProvider(tool=True, usage=True) as fake:
        yield fake
    veronica_mw.uninstrument()


def _check(ctx: ExecutionContext, bare: BareProvider, caught: ExecutionHalted) -> None:
    # steps alternate request, tool run: 3 requests and 3 tool runs, the 4th request refused
    assert caught.reason == HaltReason.STEP_LIMIT
    assert bare.count() == 3 and ran == ["Paris"] * 3
    kinds = [n.kind for n in ctx.graph.nodes()]
    assert kinds == ["llm", "tool"] * 3 and ctx.get_snapshot().step_count == 6


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_sync_tool_runner(bare: BareProvider, stream: bool) -> None:
    with anthropic.Anthropic(base_url=bare.url, api_key="t", max_retries=0) as client:
        with ExecutionContext(LIMITS) as ctx, pytest.raises(ExecutionHalted) as caught:
            runner = client.beta.messages.tool_runner(
                model=MODEL, max_tokens=1000, messages=MESSAGES, tools=[get_weather], stream=stream
            )
            for item in runner:
                if stream:
                    for _ in item:
                        pass
    _check(ctx, bare, caught.value)


@pytest.mark.anyio
async def test_async_tool_runner(bare: BareProvider) -> None:
    async with anthropic.AsyncAnthropic(base_url=bare.url, api_key="t", max_retries=0) as client:
        with ExecutionContext(LIMITS) as ctx:
            with pytest.raises(ExecutionHalted) as caught:
                runner = client.beta.messages.tool_runner(
                    model=MODEL, max_tokens=1000, messages=MESSAGES, tools=[get_weather_async]
                )
                async for _ in runner:
                    pass
    _check(ctx, bare, caught.value)
