"""Every Anthropic Messages shape, sync and async, through the real SDK against the fake server:
counted before sending, priced from the reported usage, streams settled, retries drawn."""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import pytest
from anthropic.types import Message

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.kernel.pricing import TokenUsage, price_usage

from ...support.fake_provider import FakeProvider, cost_of

MODEL = "claude-haiku-4-5"
MESSAGES: list[Any] = [{"role": "user", "content": "Say hello to the fake provider."}]
ARGS: dict[str, Any] = {"model": MODEL, "max_tokens": 256, "messages": MESSAGES}
LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=2, max_retries_total=0)


@dataclass(frozen=True)
class Shape:
    name: str
    sync: Callable[[anthropic.Anthropic], Any]
    async_: Callable[[anthropic.AsyncAnthropic], Awaitable[Any]]


def stream_iter(c: anthropic.Anthropic) -> Any:
    stream = c.messages.create(**ARGS, stream=True)
    assert type(stream) is anthropic.Stream
    return [event.type for event in stream]


async def astream_iter(c: anthropic.AsyncAnthropic) -> Any:
    stream = await c.messages.create(**ARGS, stream=True)
    assert type(stream) is anthropic.AsyncStream
    return [event.type async for event in stream]


def stream_with(c: anthropic.Anthropic) -> Any:
    with c.messages.create(**ARGS, stream=True) as stream:
        return list(stream)


async def astream_with(c: anthropic.AsyncAnthropic) -> Any:
    async with await c.messages.create(**ARGS, stream=True) as stream:
        return [event async for event in stream]


def helper(c: anthropic.Anthropic) -> Any:
    with c.messages.stream(**ARGS) as stream:
        return stream.get_final_message()


async def ahelper(c: anthropic.AsyncAnthropic) -> Any:
    async with c.messages.stream(**ARGS) as stream:
        return await stream.get_final_message()


def beta_helper(c: anthropic.Anthropic) -> Any:
    with c.beta.messages.stream(**ARGS) as stream:
        return stream.get_final_message()


async def abeta_helper(c: anthropic.AsyncAnthropic) -> Any:
    async with c.beta.messages.stream(**ARGS) as stream:
        return await stream.get_final_message()


def raw(c: anthropic.Anthropic) -> Any:
    return c.messages.with_raw_response.create(**ARGS).parse()


async def araw(c: anthropic.AsyncAnthropic) -> Any:
    return await (await c.messages.with_raw_response.create(**ARGS)).parse()


def raw_stream(c: anthropic.Anthropic) -> Any:
    return list(c.messages.with_raw_response.create(**ARGS, stream=True).parse())


async def araw_stream(c: anthropic.AsyncAnthropic) -> Any:
    response = await c.messages.with_raw_response.create(**ARGS, stream=True)
    return [e async for e in await response.parse()]


SHAPES = [
    Shape("create", lambda c: c.messages.create(**ARGS), lambda c: c.messages.create(**ARGS)),
    Shape("stream-iter", stream_iter, astream_iter),
    Shape("stream-with", stream_with, astream_with),
    Shape("helper", helper, ahelper),
    Shape("beta-create", lambda c: c.beta.messages.create(**ARGS), lambda c: c.beta.messages.create(**ARGS)),
    Shape("beta-helper", beta_helper, abeta_helper),
    Shape("raw", raw, araw),
    Shape("raw-stream", raw_stream, araw_stream),
]
IDS = [s.name for s in SHAPES]


def _check(ctx: ExecutionContext, server: FakeProvider) -> None:
    snap = ctx.get_snapshot()
    assert server.count("/v1/messages") == 2 and snap.step_count == 2
    assert snap.abort_reason == "step_limit" and snap.cost_usd_reserved == 0.0
    assert snap.cost_usd_accumulated == pytest.approx(cost_of(server.reported, "anthropic"))
    assert [(n.status, n.model) for n in ctx.graph.nodes()] == [("ok", MODEL)] * 2
    assert [n.tokens_out for n in ctx.graph.nodes()] == [r.output_tokens for r in server.reported]


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_sync_shape(client: anthropic.Anthropic, server: FakeProvider, shape: Shape) -> None:
    with ExecutionContext(LIMITS) as ctx:
        shape.sync(client)
        shape.sync(client)
        with pytest.raises(ExecutionHalted):
            shape.sync(client)
    _check(ctx, server)


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
@pytest.mark.anyio
async def test_async_shape(aclient: anthropic.AsyncAnthropic, server: FakeProvider, shape: Shape) -> None:
    async with ExecutionContext(LIMITS) as ctx:
        await shape.async_(aclient)
        await shape.async_(aclient)
        with pytest.raises(ExecutionHalted):
            await shape.async_(aclient)
    _check(ctx, server)
    await aclient.close()


def test_the_reservation_is_the_worst_case(client: anthropic.Anthropic, server: FakeProvider) -> None:
    worst = price_usage(TokenUsage(-(-len("user" + MESSAGES[0]["content"]) // 4), 256), MODEL, "anthropic")
    config = ExecutionConfig(max_cost_usd=worst * 0.99, max_steps=5, max_retries_total=0)
    with ExecutionContext(config), pytest.raises(ExecutionHalted, match="budget_exceeded"):
        client.messages.create(**ARGS)
    assert server.count() == 0
    with ExecutionContext(
        ExecutionConfig(max_cost_usd=worst * 1.01, max_steps=5, max_retries_total=0)
    ) as ctx:
        assert type(client.messages.create(**ARGS)) is Message
    assert ctx.get_snapshot().cost_usd_accumulated < worst


def test_cache_tokens_count_as_input() -> None:
    from veronica_mw.adapters.anthropic import tokens

    usage = {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 7,
    }
    assert tokens(usage) == TokenUsage(117, 5, 100, 7)
    # a stream's message_delta reports only the output: the input of message_start is kept
    assert tokens({"output_tokens": 9}, tokens(usage)) == TokenUsage(117, 9, 100, 7)


def test_abandoned_streams_keep_their_reservation(client: anthropic.Anthropic) -> None:
    config = ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0)
    with ExecutionContext(config) as ctx:
        stream = client.messages.create(**ARGS, stream=True)
        next(iter(stream))
        del stream
        gc.collect()
        with client.messages.stream(**ARGS) as helper_stream:
            next(iter(helper_stream))
        left_open = client.messages.create(**ARGS, stream=True)
        next(iter(left_open))
    nodes = ctx.graph.nodes()
    assert [n.status for n in nodes] == ["ok"] * 3
    assert all(n.cost_usd == pytest.approx(n.reserved_usd) and n.cost_usd > 0 for n in nodes)
    left_open.close()


def test_retries_draw_and_a_spent_budget_refuses_the_next(
    server: FakeProvider, instrumented: None, make_client: Callable[..., anthropic.Anthropic]
) -> None:
    client = make_client(max_retries=4)
    server.fail_next(1, 529)
    with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=1)) as ctx:
        client.messages.create(**ARGS)
        assert ctx.get_snapshot().retries_used == 1 and server.count() == 2
        server.fail_next(3, 429)
        with pytest.raises(ExecutionHalted) as halted:
            client.messages.create(**ARGS)
    assert halted.value.reason == "retry_limit"
    assert server.count() == 3  # the refused retry was never sent


@pytest.mark.anyio
async def test_async_retry_refused(
    server: FakeProvider, instrumented: None, make_aclient: Callable[..., anthropic.AsyncAnthropic]
) -> None:
    client = make_aclient(max_retries=4)
    server.fail_next(3, 500)
    async with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0)):
        with pytest.raises(ExecutionHalted, match="retry_limit"):
            await client.messages.create(**ARGS)
    assert server.count() == 1


def test_token_counting_is_not_a_model_call(client: anthropic.Anthropic, server: FakeProvider) -> None:
    with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=0, max_retries_total=0)) as ctx:
        with pytest.raises(anthropic.NotFoundError):  # the fake has no such route; it was sent
            client.messages.count_tokens(model=MODEL, messages=MESSAGES)
    assert ctx.get_snapshot().step_count == 0
