"""The ``mistralai`` SDK's own retries (its ``retry_config`` backoff) each draw one retry from
``max_retries_total``, like the OpenAI SDK's; a refused retry is never sent. Through the real SDK
against the fake provider's ``/v1/chat/completions``, which fails the next requests on demand."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from mistralai.client import Mistral
from mistralai.client.utils import BackoffStrategy, RetryConfig

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted

from ...support.fake_provider import FakeProvider

MODEL = "mistral-small-latest"
MESSAGES: list[Any] = [{"role": "user", "content": "Say hello."}]
FAST = RetryConfig("backoff", BackoffStrategy(1, 5, 1.1, 30_000, jitter_ms=0), False)


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        yield server


@pytest.fixture
def retrying_client(fake: FakeProvider, instrumented: None) -> Mistral:
    return Mistral(api_key="test", server_url=fake.url, retry_config=FAST)


def _limits(retries: int) -> ExecutionConfig:
    return ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=retries)


def test_each_sdk_retry_draws_one_retry(retrying_client: Mistral, fake: FakeProvider) -> None:
    fake.fail_next(2, 503)
    with ExecutionContext(_limits(2)) as ctx:
        reply = retrying_client.chat.complete(model=MODEL, messages=MESSAGES)
    message = reply.choices[0].message
    assert message is not None and message.content
    snap = ctx.get_snapshot()
    assert fake.count() == 3 and snap.step_count == 1 and snap.retries_used == 2
    assert [n.status for n in ctx.graph.nodes()] == ["ok"]


def test_a_spent_retry_budget_refuses_the_retry_before_it_is_sent(
    retrying_client: Mistral, fake: FakeProvider
) -> None:
    fake.fail_next(5, 429)
    with ExecutionContext(_limits(1)) as ctx, pytest.raises(ExecutionHalted) as halted:
        retrying_client.chat.complete(model=MODEL, messages=MESSAGES)
    assert halted.value.reason == "retry_limit"
    assert fake.count() == 2  # the first attempt and the one retry allowed
    (node,) = ctx.graph.nodes()
    assert node.status == "error" and node.cost_usd == 0.0  # error responses are not billed


@pytest.mark.anyio
@pytest.mark.usefixtures("instrumented")
async def test_async_and_streamed_retries_draw_and_are_refused(fake: FakeProvider) -> None:
    fake.fail_next(1, 500)
    async with Mistral(api_key="test", server_url=fake.url, retry_config=FAST) as retrying_client:
        await _async_calls(retrying_client, fake)
    assert fake.count() == 3  # 2 for the stream, then 1: its retry was refused


async def _async_calls(retrying_client: Mistral, fake: FakeProvider) -> None:
    with ExecutionContext(_limits(1)) as ctx:
        stream = await retrying_client.chat.stream_async(model=MODEL, messages=MESSAGES)
        async for _ in stream:
            pass
        assert ctx.get_snapshot().retries_used == 1
        fake.fail_next(3, 429)
        with pytest.raises(ExecutionHalted):
            await retrying_client.chat.complete_async(model=MODEL, messages=MESSAGES)
