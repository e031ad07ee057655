"""The SDK's own retries draw from ``max_retries_total``; once it is spent the next retry is refused
before it is sent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted

from ...support.fake_provider import FakeProvider

MODEL = "gpt-4o-mini"
MESSAGES: list[Any] = [{"role": "user", "content": "retry me"}]


@pytest.mark.parametrize("status", [429, 500])
def test_each_sdk_retry_draws_one_retry(
    server: FakeProvider, instrumented: None, status: int, make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(max_retries=3)
    server.fail_next(2, status)
    with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=2)) as ctx:
        client.chat.completions.create(model=MODEL, messages=MESSAGES)
    snap = ctx.get_snapshot()
    assert server.count() == 3 and snap.step_count == 1 and snap.retries_used == 2
    assert [n.status for n in ctx.graph.nodes()] == ["ok"]


def test_a_spent_retry_budget_refuses_the_retry_before_it_is_sent(
    server: FakeProvider, instrumented: None, make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(max_retries=5)
    server.fail_next(5, 429)
    with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=1)) as ctx:
        with pytest.raises(ExecutionHalted) as halted:
            client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert halted.value.reason == "retry_limit"
    assert server.count() == 2  # the first attempt and the one retry allowed
    node = ctx.graph.nodes()[0]
    assert node.status == "error" and node.cost_usd == 0.0  # error responses are not billed
    with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0)):
        with pytest.raises(ExecutionHalted):
            client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert server.count() == 3  # no retry at all


@pytest.mark.anyio
async def test_async_retries_draw_and_are_refused(
    server: FakeProvider, instrumented: None, make_aclient: Callable[..., openai.AsyncOpenAI]
) -> None:
    client = make_aclient(max_retries=4)
    server.fail_next(1, 500)
    async with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=1)) as ctx:
        await client.chat.completions.create(model=MODEL, messages=MESSAGES)
        assert ctx.get_snapshot().retries_used == 1
        server.fail_next(4, 429)
        with pytest.raises(ExecutionHalted):
            await client.responses.create(model=MODEL, input="again")
    assert server.count() == 3


def test_a_failed_call_after_the_sdks_retries_is_recorded(
    server: FakeProvider, instrumented: None, make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(max_retries=1)
    server.fail_next(2, 500)
    with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=5)) as ctx:
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model=MODEL, messages=MESSAGES)
    snap = ctx.get_snapshot()
    # one SDK retry, plus the failure itself (a failed call draws a retry, like any wrapped call)
    assert server.count() == 2 and snap.retries_used == 2 and snap.step_count == 1
