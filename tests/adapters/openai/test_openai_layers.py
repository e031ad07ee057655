"""One model call is one step however many layers see it: a request made inside ``ctx.call_llm``
adopts that call's step (and tops its reservation up to the request's worst case)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted

from ...support.fake_provider import FakeProvider, cost_of

MODEL = "gpt-4o-mini"
MESSAGES: list[Any] = [{"role": "user", "content": "layered"}]
LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0)


def test_call_llm_around_the_sdk_is_one_step(client: openai.OpenAI, server: FakeProvider) -> None:
    with ExecutionContext(LIMITS) as ctx:
        ctx.call_llm(client.chat.completions.create, model=MODEL, messages=MESSAGES)
        ctx.call_llm(client.chat.completions.create, model=MODEL, messages=MESSAGES)
    snap = ctx.get_snapshot()
    assert server.count() == 2 and snap.step_count == 2
    assert snap.cost_usd_accumulated == pytest.approx(cost_of(server.reported, "openai"))


def test_two_requests_inside_one_call_are_two_steps(client: openai.OpenAI, server: FakeProvider) -> None:
    def twice() -> None:
        client.chat.completions.create(model=MODEL, messages=MESSAGES)
        client.chat.completions.create(model=MODEL, messages=MESSAGES)

    with ExecutionContext(LIMITS) as ctx:
        ctx.call_llm(twice)
    assert server.count() == 2 and ctx.get_snapshot().step_count == 2
    first, second = ctx.graph.nodes()
    assert second.parent_id == first.node_id  # the second request ran inside the adopted call


@pytest.mark.anyio
async def test_acall_llm_around_the_async_sdk_is_one_step(
    aclient: openai.AsyncOpenAI, server: FakeProvider
) -> None:
    async with ExecutionContext(LIMITS) as ctx:
        await ctx.acall_llm(aclient.chat.completions.create, model=MODEL, messages=MESSAGES)
    assert server.count() == 1 and ctx.get_snapshot().step_count == 1
    await aclient.close()


def test_the_adopted_step_is_topped_up_to_the_worst_case(client: openai.OpenAI, server: FakeProvider) -> None:
    # call_llm reserved nothing; the request underneath needs ~$0.06 (100k output tokens).
    with ExecutionContext(ExecutionConfig(max_cost_usd=0.05, max_steps=10, max_retries_total=0)) as ctx:
        with pytest.raises(ExecutionHalted, match="budget_exceeded"):
            ctx.call_llm(client.chat.completions.create, model=MODEL, messages=MESSAGES, max_tokens=100_000)
    assert server.count() == 0
    assert ctx.get_snapshot().step_count == 0  # the step of a call that never ran is given back


def test_a_tool_step_is_not_adopted(client: openai.OpenAI, server: FakeProvider) -> None:
    with ExecutionContext(LIMITS) as ctx:
        ctx.call_tool(client.chat.completions.create, model=MODEL, messages=MESSAGES)
    assert [n.kind for n in ctx.graph.nodes()] == ["tool", "llm"] and server.count() == 1
