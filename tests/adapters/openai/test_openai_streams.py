"""OpenAI streams: settled when read to the end, closed, abandoned or when their context ends —
never at $0 when they were not read to the end."""

from __future__ import annotations

import gc
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionStreamOptionsParam

from veronica_mw import CallNode, ExecutionConfig, ExecutionContext

from ...support.fake_provider import FakeProvider, cost_of

MODEL = "gpt-4o-mini"
MESSAGES: list[Any] = [{"role": "user", "content": "Stream something."}]
USAGE: ChatCompletionStreamOptionsParam = {"include_usage": True}
LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0)


def _stream(client: openai.OpenAI, **kw: Any) -> Any:
    return client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True, **kw)


def _only(ctx: ExecutionContext) -> CallNode:
    (node,) = ctx.graph.nodes()
    return node


def _kept_reservation(ctx: ExecutionContext) -> None:
    node = _only(ctx)
    assert node.settled and node.reserved_usd > 0.0
    assert node.cost_usd == pytest.approx(node.reserved_usd)
    snap = ctx.get_snapshot()
    assert snap.cost_usd_accumulated == pytest.approx(node.reserved_usd) and snap.cost_usd_reserved == 0.0


def test_read_to_the_end_with_usage_is_exact(client: openai.OpenAI, server: FakeProvider) -> None:
    with ExecutionContext(LIMITS) as ctx:
        chunks = list(_stream(client, stream_options=USAGE))
    assert chunks[-1].usage is not None
    assert _only(ctx).cost_usd == pytest.approx(cost_of(server.reported, "openai"))
    assert _only(ctx).tokens_in == server.reported[0].input_tokens


def test_read_to_the_end_without_usage_is_estimated_from_the_text(client: openai.OpenAI) -> None:
    with ExecutionContext(LIMITS) as ctx:
        text = "".join(c.choices[0].delta.content or "" for c in _stream(client) if c.choices)
    node = _only(ctx)
    assert node.tokens_out == -(-len(text) // 4) and 0.0 < node.cost_usd < node.reserved_usd
    assert [e.kind for e in ctx.get_events()] == ["usage_estimated"]


def test_closed_early_keeps_the_reservation(client: openai.OpenAI) -> None:
    with ExecutionContext(LIMITS) as ctx:
        stream = _stream(client, stream_options=USAGE)
        next(stream)
        stream.close()
        _kept_reservation(ctx)


def test_with_block_left_early_keeps_the_reservation(client: openai.OpenAI) -> None:
    with ExecutionContext(LIMITS) as ctx:
        with _stream(client, stream_options=USAGE) as stream:
            for _ in stream:
                break
        _kept_reservation(ctx)


def test_garbage_collected_stream_keeps_the_reservation(client: openai.OpenAI) -> None:
    with ExecutionContext(LIMITS) as ctx:
        stream = _stream(client, stream_options=USAGE)
        next(stream)
        del stream
        gc.collect()
        _kept_reservation(ctx)


def test_stream_open_when_the_context_ends_is_settled(client: openai.OpenAI) -> None:
    with ExecutionContext(LIMITS) as ctx:
        stream = _stream(client, stream_options=USAGE)
        next(stream)
        assert not _only(ctx).settled
    _kept_reservation(ctx)
    stream.close()  # after the context: already settled, nothing changes
    _kept_reservation(ctx)


def test_helper_stream_closed_early_keeps_the_reservation(client: openai.OpenAI) -> None:
    with ExecutionContext(LIMITS) as ctx:
        with client.chat.completions.stream(model=MODEL, messages=MESSAGES) as stream:
            for _ in stream:
                break
        _kept_reservation(ctx)
    with ExecutionContext(LIMITS) as ctx:
        with client.responses.stream(model=MODEL, input="hi") as responses:
            for _ in responses:
                break
        _kept_reservation(ctx)


def test_usage_already_reported_when_closed_is_used(client: openai.OpenAI, server: FakeProvider) -> None:
    with ExecutionContext(LIMITS) as ctx:
        stream = _stream(client, stream_options=USAGE)
        for chunk in stream:
            if chunk.usage is not None:
                break  # [DONE] not read yet
        stream.close()
    assert _only(ctx).cost_usd == pytest.approx(cost_of(server.reported, "openai"))


@pytest.mark.anyio
async def test_async_stream_closed_early_and_abandoned(aclient: openai.AsyncOpenAI) -> None:
    async with ExecutionContext(LIMITS) as ctx:
        stream = await aclient.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
        await stream.__anext__()
        await stream.close()
        _kept_reservation(ctx)
    async with ExecutionContext(LIMITS) as ctx:
        stream = await aclient.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
        await stream.__anext__()
    _kept_reservation(ctx)  # the context ended with the stream still open
    await stream.close()
    await aclient.close()


def test_no_observer_stays_registered_once_streams_are_settled(client: openai.OpenAI) -> None:
    from veronica_mw.kernel import observer
    from veronica_mw.observe import otel

    def reapers() -> tuple[observer.Observer, ...]:  # all but OpenTelemetry's (always registered)
        return tuple(o for o in observer.global_observers() if o is not otel.active_observer())

    with ExecutionContext(LIMITS):
        stream = _stream(client)
        assert reapers()  # the context-end reaper, while a stream is open
        list(stream)
    assert reapers() == ()
