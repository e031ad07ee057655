"""Cost of a model call: ``ModelResponse.usage`` priced with genai-prices for the agent's model."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import Agent, Model, ModelProvider, RunConfig, Runner
from genai_prices import Usage, calc_price

from veronica_mw import ExecutionConfig, ExecutionContext
from veronica_mw.adapters._openai_agents_hooks import model_and_provider
from veronica_mw.adapters.openai_agents import VeronicaRunHooks

from .fakes import Counter, ToolLoopModel, ping_tool

LIMITS = ExecutionConfig(max_cost_usd=100.0, max_steps=100, max_retries_total=0)


def expected(model: str, calls: int, usage: tuple[int, int, int] = (1000, 500, 200)) -> float:
    inp, out, cached = usage
    price = calc_price(Usage(input_tokens=inp, output_tokens=out, cache_read_tokens=cached), model)
    return float(price.total_price) * calls


class FakeProvider(ModelProvider):
    """Resolves model names (as the SDK's default provider would) to offline fakes."""

    def __init__(self, counter: Counter) -> None:
        self.model = ToolLoopModel(counter, model="not-a-real-model", finish_after=2)
        self.names: list[str | None] = []

    def get_model(self, model_name: str | None) -> Model:
        self.names.append(model_name)
        return self.model


def run(agent: Agent[Any], ctx: ExecutionContext, **kwargs: Any) -> None:
    asyncio.run(Runner.run(agent, "go", hooks=VeronicaRunHooks(ctx), **kwargs))


def test_a_model_instance_is_priced_for_the_model_it_names() -> None:
    counter = Counter()
    agent = Agent(
        name="a", model=ToolLoopModel(counter, model="gpt-4o", finish_after=3), tools=[ping_tool(counter)]
    )
    ctx = ExecutionContext(LIMITS)
    run(agent, ctx)
    cost = ctx.get_snapshot().cost_usd_accumulated
    assert cost == pytest.approx(expected("gpt-4o", 3), rel=1e-9)
    llm = [n for n in ctx.graph.nodes() if n.kind == "llm"]
    assert [(n.tokens_in, n.tokens_out, n.model) for n in llm] == [(1000, 500, "gpt-4o")] * 3


@pytest.mark.parametrize("name", ["gpt-4o-mini", "openai/gpt-4o-mini"])
def test_a_model_name_is_priced_as_named(name: str) -> None:
    counter = Counter()
    provider = FakeProvider(counter)
    agent = Agent(name="a", model=name, tools=[ping_tool(counter)])
    ctx = ExecutionContext(LIMITS)
    run(agent, ctx, run_config=RunConfig(model_provider=provider))
    assert provider.names == [name, name]  # resolved once per turn
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(expected("gpt-4o-mini", 2), rel=1e-9)


def test_a_model_without_a_price_keeps_the_hint_and_says_so() -> None:
    counter = Counter()
    agent = Agent(name="a", model=ToolLoopModel(counter, model="no-such-model-xyz", finish_after=1))
    ctx = ExecutionContext(LIMITS)
    asyncio.run(Runner.run(agent, "go", hooks=VeronicaRunHooks(ctx, cost_estimate_hint=0.25)))
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(0.25)
    assert [e.kind for e in ctx.get_events()] == ["unpriced"]


def test_no_usage_reported_keeps_the_hint() -> None:
    counter = Counter()
    agent = Agent(name="a", model=ToolLoopModel(counter, usage=(0, 0, 0), finish_after=1))
    ctx = ExecutionContext(LIMITS)
    asyncio.run(Runner.run(agent, "go", hooks=VeronicaRunHooks(ctx, cost_estimate_hint=0.125)))
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(0.125)


@pytest.mark.parametrize(
    ("model", "parsed"),
    [
        ("gpt-4o", ("gpt-4o", None)),
        ("openai/gpt-4o", ("gpt-4o", "openai")),
        ("litellm/anthropic/claude-3-5-sonnet-latest", ("claude-3-5-sonnet-latest", "anthropic")),
        ("any-llm/openrouter/openai/gpt-4.1", ("openai/gpt-4.1", "openrouter")),
        ("", (None, None)),
        (42, (None, None)),
    ],
)
def test_model_names(model: Any, parsed: tuple[str | None, str | None]) -> None:
    assert model_and_provider(model) == parsed


def test_an_unnamed_model_is_the_sdks_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_DEFAULT_MODEL", "gpt-4.1")
    assert model_and_provider(None) == ("gpt-4.1", None)
    assert model_and_provider(ToolLoopModel(Counter(), model="gpt-4o-mini")) == ("gpt-4o-mini", None)
