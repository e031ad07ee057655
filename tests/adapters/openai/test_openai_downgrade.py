"""DowngradeAt with the OpenAI SDK: once 80% of the budget is spent, requests reach the (fake) server
with the fallback model; the reservation is the fallback's; the ceiling holds."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest

from veronica_mw import DowngradeAt, ExecutionConfig, ExecutionContext, ExecutionHalted, PolicyPipeline
from veronica_mw.kernel.pricing import TokenUsage, price_usage

from ...support.fake_provider import FakeProvider, cost_of

MESSAGES: list[Any] = [{"role": "user", "content": "summarise the quarter in one line"}]
MAX_TOKENS = 200


def worst_case(model: str) -> float:
    """What the adapter reserves for one request below (prompt estimate + max_tokens)."""
    tokens_in = -(-sum(len(s) for m in MESSAGES for s in m.values()) // 4)
    return price_usage(TokenUsage(tokens_in, MAX_TOKENS), model, "openai")


def downgrading(budget: float) -> ExecutionContext:
    config = ExecutionConfig(max_cost_usd=budget, max_steps=10_000, max_retries_total=0)
    return ExecutionContext(config, PolicyPipeline([DowngradeAt(0.8, "gpt-4o-mini")]))


def test_requests_after_80_percent_are_sent_with_the_fallback(
    server: FakeProvider, client: openai.OpenAI
) -> None:
    budget = 12 * worst_case("gpt-4o")
    ctx = downgrading(budget)
    with ctx, pytest.raises(ExecutionHalted) as info:
        for _ in range(10_000):
            client.chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=MAX_TOKENS)
    assert info.value.reason == "budget_exceeded"
    models = [r.body["model"] for r in server.received]
    switch = models.index("gpt-4o-mini")
    assert set(models[:switch]) == {"gpt-4o"} and set(models[switch:]) == {"gpt-4o-mini"}
    assert len(models) - switch > 10  # the cheap model carried the run on
    # It switched exactly at the threshold: before the switch the committed cost was below 80%.
    assert (
        cost_of(server.reported[: switch - 1], "openai")
        < 0.8 * budget
        <= cost_of(server.reported[:switch], "openai")
    )
    snap = ctx.get_snapshot()
    assert snap.cost_usd_accumulated == pytest.approx(cost_of(server.reported, "openai"))
    assert snap.cost_usd_accumulated <= budget  # the ceiling holds
    events = [e for e in snap.events if e.kind == "downgraded"]  # one per call (the list keeps 256)
    assert len(events) == min(256, len(models) - switch)
    assert (events[-1].data["from_model"], events[-1].data["to_model"]) == ("gpt-4o", "gpt-4o-mini")
    assert [n.model for n in ctx.graph.nodes()] == models  # each step names the model it called
    downgraded = [n for n in ctx.graph.nodes() if n.fallback_model]
    assert len(downgraded) == len(models) - switch
    # Reserved at the fallback's price, not the requested model's.
    assert downgraded[0].reserved_usd == pytest.approx(worst_case("gpt-4o-mini"))


def test_async_and_streaming_requests_are_downgraded_too(
    server: FakeProvider, aclient: openai.AsyncOpenAI
) -> None:
    ctx = ExecutionContext(
        ExecutionConfig(max_cost_usd=1.0, max_steps=100, max_retries_total=0),
        PolicyPipeline([DowngradeAt(0.0, "gpt-4o-mini")]),
    )

    async def run() -> None:
        with ctx:
            await aclient.chat.completions.create(model="gpt-4o", messages=MESSAGES)
            stream = await aclient.chat.completions.create(
                model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
            )
            async for _ in stream:
                pass
            await aclient.responses.create(model="gpt-4o", input="hi")
        await aclient.close()

    asyncio.run(run())
    assert [r.body["model"] for r in server.received] == ["gpt-4o-mini"] * 3
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(cost_of(server.reported, "openai"))
    assert "downgrade_unsupported" not in [e.kind for e in ctx.get_events()]


def test_the_callers_request_is_not_mutated(server: FakeProvider, client: openai.OpenAI) -> None:
    ctx = ExecutionContext(
        ExecutionConfig(max_cost_usd=1.0, max_steps=100, max_retries_total=0),
        PolicyPipeline([DowngradeAt(0.0, "gpt-4o-mini")]),
    )
    body: dict[str, Any] = {"model": "gpt-4o", "messages": MESSAGES}
    with ctx:
        response = client.chat.completions.create(**body)
    assert body["model"] == "gpt-4o" and response.model == "gpt-4o-mini"
