"""Pydantic AI over a provider SDK that veronica-mw does not instrument (the Groq case): the
capability reserves each request's worst case itself -- never 0 for a priced model -- so a cost
ceiling refuses the request that could cross it before anything is sent, and an unpriced model
under a cost limit is refused up front (``unpriced``), not run for $0. The OpenAI SDK here is not
instrumented: it stands for any SDK whose requests only the framework adapter sees."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import openai
import pytest
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, HaltReason, TokenUsage
from veronica_mw.adapters._provider_estimate import worst_case
from veronica_mw.adapters.pydantic_ai import VeronicaCapability
from veronica_mw.kernel.pricing import clear_price, set_price

from ...support.fake_provider import FakeProvider


@pytest.fixture
def server() -> Iterator[FakeProvider]:
    veronica_mw.uninstrument()  # nothing below the framework sees these requests
    with FakeProvider() as fake:
        yield fake


def run(server: FakeProvider, model: str, prompt: str, **settings: int) -> None:
    async def main() -> None:
        async with openai.AsyncOpenAI(base_url=server.openai_url, api_key="test", max_retries=0) as client:
            chat = OpenAIChatModel(model, provider=OpenAIProvider(openai_client=client))
            agent = Agent(chat, capabilities=[VeronicaCapability()], model_settings=settings or None)  # type: ignore[arg-type]
            await agent.run(prompt)

    asyncio.run(main())


def test_the_worst_case_is_reserved_before_the_request(server: FakeProvider) -> None:
    with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0)) as ctx:
        run(server, "gpt-4o-mini", "What is the capital of France?", max_tokens=500)
    [node] = ctx.graph.nodes()
    assert server.count() == 1
    # the prompt is a handful of tokens: the reservation is 500 output tokens and a little input
    low, high = worst_case("gpt-4o-mini", "openai", 1, 500), worst_case("gpt-4o-mini", "openai", 100, 500)
    assert low is not None and high is not None and low < node.reserved_usd < high


def test_a_ceiling_below_the_worst_case_refuses_before_anything_is_sent(server: FakeProvider) -> None:
    worst = worst_case("gpt-4o-mini", "openai", 10, 4096)
    assert worst is not None
    # above what the call really costs (a few dozen tokens), below what it could cost
    ceiling = worst / 4
    with ExecutionContext(ExecutionConfig(max_cost_usd=ceiling, max_steps=5, max_retries_total=0)) as ctx:
        with pytest.raises(ExecutionHalted) as caught:
            run(server, "gpt-4o-mini", "What is the capital of France?")
    assert caught.value.reason == HaltReason.BUDGET_EXCEEDED
    assert server.count() == 0 and ctx.get_snapshot().cost_usd_accumulated == 0.0


def test_an_unpriced_model_under_a_cost_limit_is_refused_up_front(server: FakeProvider) -> None:
    with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0)) as ctx:
        with pytest.raises(ExecutionHalted) as caught:
            run(server, "in-house-model-7", "hello")
    assert caught.value.reason == "unpriced" and "in-house-model-7" in caught.value.detail
    assert "cost_estimate_hint" in caught.value.detail and "set_price" in caught.value.detail
    assert server.count() == 0 and [e.kind for e in ctx.get_events()] == ["unpriced"]


def test_a_price_override_prices_it(server: FakeProvider) -> None:
    set_price("in-house-model-7", input_usd_per_mtok=1.0, output_usd_per_mtok=2.0)
    try:
        with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0)) as ctx:
            run(server, "in-house-model-7", "hello", max_tokens=100)
    finally:
        clear_price("in-house-model-7")
    [node] = ctx.graph.nodes()
    reported = server.reported[0]
    assert node.cost_usd == pytest.approx((reported.input_tokens * 1.0 + reported.output_tokens * 2.0) / 1e6)
    assert node.reserved_usd >= 100 * 2.0 / 1e6
    assert TokenUsage(node.tokens_in, node.tokens_out) == TokenUsage(
        reported.input_tokens, reported.output_tokens
    )
