"""Every OpenAI call shape, sync and async, against the fake server through the real SDK.

For each shape: two calls are allowed (one step each, priced from the usage the server reported,
the SDK's own return type), the third is refused with ExecutionHalted before a byte is sent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionStreamOptionsParam
from openai.types.responses import Response
from pydantic import BaseModel

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted

from ...support.fake_provider import FakeProvider, cost_of

MODEL = "gpt-4o-mini"
MESSAGES: list[Any] = [{"role": "user", "content": "Say hello to the fake provider."}]
USAGE: ChatCompletionStreamOptionsParam = {"include_usage": True}


class Answer(BaseModel):
    answer: str


@dataclass(frozen=True)
class Shape:
    name: str
    sync: Callable[[openai.OpenAI], Any]
    async_: Callable[[openai.AsyncOpenAI], Awaitable[Any]]
    path: str
    exact: bool = True  # the server reports usage for this shape (else it is estimated)


def _chat(c: openai.OpenAI, **kw: Any) -> Any:
    return c.chat.completions.create(model=MODEL, messages=MESSAGES, **kw)


def _achat(c: openai.AsyncOpenAI, **kw: Any) -> Any:
    return c.chat.completions.create(model=MODEL, messages=MESSAGES, **kw)


def stream_iter(c: openai.OpenAI) -> Any:
    stream = _chat(c, stream=True, stream_options=USAGE)
    assert type(stream) is openai.Stream
    return [chunk for chunk in stream]


async def astream_iter(c: openai.AsyncOpenAI) -> Any:
    stream = await _achat(c, stream=True, stream_options=USAGE)
    assert type(stream) is openai.AsyncStream
    return [chunk async for chunk in stream]


def stream_with(c: openai.OpenAI) -> Any:
    with _chat(c, stream=True) as stream:
        assert stream.response.status_code == 200
        return [chunk for chunk in stream]


async def astream_with(c: openai.AsyncOpenAI) -> Any:
    async with await _achat(c, stream=True) as stream:
        return [chunk async for chunk in stream]


def chat_stream_helper(c: openai.OpenAI) -> Any:
    with c.chat.completions.stream(model=MODEL, messages=MESSAGES, stream_options=USAGE) as stream:
        return stream.get_final_completion()


async def achat_stream_helper(c: openai.AsyncOpenAI) -> Any:
    async with c.chat.completions.stream(model=MODEL, messages=MESSAGES, stream_options=USAGE) as stream:
        return await stream.get_final_completion()


def parse(c: openai.OpenAI) -> Any:
    result = c.chat.completions.parse(model=MODEL, messages=MESSAGES, response_format=Answer)
    assert isinstance(result.choices[0].message.parsed, Answer)
    return result


async def aparse(c: openai.AsyncOpenAI) -> Any:
    return await c.chat.completions.parse(model=MODEL, messages=MESSAGES, response_format=Answer)


def responses_stream(c: openai.OpenAI) -> Any:
    with c.responses.create(model=MODEL, input="hello", stream=True) as stream:
        return [event for event in stream]


async def aresponses_stream(c: openai.AsyncOpenAI) -> Any:
    stream = await c.responses.create(model=MODEL, input="hello", stream=True)
    return [event async for event in stream]


def responses_helper(c: openai.OpenAI) -> Any:
    with c.responses.stream(model=MODEL, input="hello") as stream:
        return stream.get_final_response()


async def aresponses_helper(c: openai.AsyncOpenAI) -> Any:
    async with c.responses.stream(model=MODEL, input="hello") as stream:
        return await stream.get_final_response()


def raw(c: openai.OpenAI) -> Any:
    response = c.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES)
    assert isinstance(response.parse(), ChatCompletion)
    return response


async def araw(c: openai.AsyncOpenAI) -> Any:
    response = await c.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES)
    return response.parse()


def raw_stream(c: openai.OpenAI) -> Any:
    response = c.chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, stream=True, stream_options=USAGE
    )
    return list(response.parse())


async def araw_stream(c: openai.AsyncOpenAI) -> Any:
    response = await c.chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, stream=True, stream_options=USAGE
    )
    return [chunk async for chunk in response.parse()]


def streaming_response(c: openai.OpenAI) -> Any:
    with c.chat.completions.with_streaming_response.create(model=MODEL, messages=MESSAGES) as response:
        return response.parse()


async def astreaming_response(c: openai.AsyncOpenAI) -> Any:
    async with c.chat.completions.with_streaming_response.create(model=MODEL, messages=MESSAGES) as response:
        return await response.parse()


def raw_responses(c: openai.OpenAI) -> Any:
    return c.responses.with_raw_response.create(model=MODEL, input="hello").parse()


async def araw_responses(c: openai.AsyncOpenAI) -> Any:
    return (await c.responses.with_raw_response.create(model=MODEL, input="hello")).parse()


SHAPES = [
    Shape(
        "create",
        lambda c: _chat(c, max_tokens=50),
        lambda c: _achat(c, max_tokens=50),
        "/v1/chat/completions",
    ),
    Shape("stream-iter", stream_iter, astream_iter, "/v1/chat/completions"),
    Shape("stream-with", stream_with, astream_with, "/v1/chat/completions", exact=False),
    Shape("chat-stream-helper", chat_stream_helper, achat_stream_helper, "/v1/chat/completions"),
    Shape("parse", parse, aparse, "/v1/chat/completions"),
    Shape(
        "responses",
        lambda c: c.responses.create(model=MODEL, input="hello", max_output_tokens=64),
        lambda c: c.responses.create(model=MODEL, input="hello", max_output_tokens=64),
        "/v1/responses",
    ),
    Shape("responses-stream", responses_stream, aresponses_stream, "/v1/responses"),
    Shape("responses-helper", responses_helper, aresponses_helper, "/v1/responses"),
    Shape(
        "responses-parse",
        lambda c: c.responses.parse(model=MODEL, input="hello", text_format=Answer),
        lambda c: c.responses.parse(model=MODEL, input="hello", text_format=Answer),
        "/v1/responses",
    ),
    Shape(
        "embeddings",
        lambda c: c.embeddings.create(model="text-embedding-3-small", input=["a", "b"]),
        lambda c: c.embeddings.create(model="text-embedding-3-small", input=["a", "b"]),
        "/v1/embeddings",
    ),
    Shape("raw", raw, araw, "/v1/chat/completions"),
    Shape("raw-stream", raw_stream, araw_stream, "/v1/chat/completions"),
    Shape("streaming-response", streaming_response, astreaming_response, "/v1/chat/completions"),
    Shape("raw-responses", raw_responses, araw_responses, "/v1/responses"),
]
IDS = [shape.name for shape in SHAPES]
LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=2, max_retries_total=0)


def _check(ctx: ExecutionContext, server: FakeProvider, shape: Shape) -> None:
    snap = ctx.get_snapshot()
    assert server.count() == 2 and server.count(shape.path) == 2  # the refused call sent nothing
    assert snap.step_count == 2 and snap.abort_reason == "step_limit"
    assert snap.cost_usd_reserved == 0.0 and snap.in_flight == 0
    nodes = ctx.graph.nodes()
    assert [n.status for n in nodes] == ["ok", "ok"]
    assert all(n.name.startswith("openai.") for n in nodes)
    if shape.exact:
        assert snap.cost_usd_accumulated == pytest.approx(cost_of(server.reported, "openai"))
        assert [n.tokens_out for n in nodes] == [r.output_tokens for r in server.reported]
    else:
        assert snap.cost_usd_accumulated > 0.0
        assert {e.kind for e in snap.events} == {"usage_estimated"}


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_sync_shape_counts_and_refuses_before_sending(
    client: openai.OpenAI, server: FakeProvider, shape: Shape
) -> None:
    with ExecutionContext(LIMITS) as ctx:
        shape.sync(client)
        shape.sync(client)
        with pytest.raises(ExecutionHalted) as halted:
            shape.sync(client)
    assert halted.value.reason == "step_limit"
    _check(ctx, server, shape)


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
@pytest.mark.anyio
async def test_async_shape_counts_and_refuses_before_sending(
    aclient: openai.AsyncOpenAI, server: FakeProvider, shape: Shape
) -> None:
    async with ExecutionContext(LIMITS) as ctx:
        await shape.async_(aclient)
        await shape.async_(aclient)
        with pytest.raises(ExecutionHalted):
            await shape.async_(aclient)
    _check(ctx, server, shape)
    await aclient.close()


def test_results_are_the_sdks_own(client: openai.OpenAI) -> None:
    with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0)):
        assert type(_chat(client)) is ChatCompletion
        assert type(client.responses.create(model=MODEL, input="hi")) is Response
        stream = _chat(client, stream=True)
        assert type(stream) is openai.Stream and isinstance(stream.response.status_code, int)
        stream.close()


def test_a_worst_case_over_the_budget_is_refused_before_sending(
    client: openai.OpenAI, server: FakeProvider
) -> None:
    # gpt-4o-mini output is $0.60 / 1M tokens: reserving 100k output tokens needs $0.06.
    with ExecutionContext(ExecutionConfig(max_cost_usd=0.05, max_steps=10, max_retries_total=0)) as ctx:
        with pytest.raises(ExecutionHalted) as halted:
            _chat(client, max_tokens=100_000)
    assert halted.value.reason == "budget_exceeded"
    assert server.count() == 0 and ctx.get_snapshot().step_count == 0
    with ExecutionContext(ExecutionConfig(max_cost_usd=0.05, max_steps=10, max_retries_total=0)) as ctx:
        _chat(client, max_tokens=1000)  # small enough: sent, and charged what it really cost
    assert server.count() == 1
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(cost_of(server.reported, "openai"))


def test_outside_a_context_calls_pass_through(client: openai.OpenAI, server: FakeProvider) -> None:
    assert type(_chat(client)) is ChatCompletion
    assert len(list(_chat(client, stream=True))) > 0
    assert server.count() == 2


def test_uninstrument_restores_the_sdk(server: FakeProvider) -> None:
    from openai._base_client import SyncAPIClient

    import veronica_mw

    original = SyncAPIClient.request
    veronica_mw.instrument("openai")
    assert SyncAPIClient.request is not original
    veronica_mw.instrument("openai")  # idempotent
    veronica_mw.uninstrument()
    assert SyncAPIClient.request is original
    with (
        openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0) as client,
        ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=0, max_retries_total=0)) as ctx,
    ):
        _chat(client)  # not instrumented: nothing refuses it
    assert server.count() == 1 and ctx.get_snapshot().step_count == 0


def test_output_checks_see_the_sdks_response(client: openai.OpenAI, server: FakeProvider) -> None:
    from veronica_mw import MaxLength, OutputRejected

    config = ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=3)
    with ExecutionContext(config, checks=[MaxLength(10)]) as ctx:
        with pytest.raises(OutputRejected):
            _chat(client)
    node = ctx.graph.nodes()[0]
    assert node.status == "rejected" and node.cost_usd == pytest.approx(cost_of(server.reported, "openai"))
    assert ctx.get_snapshot().retries_used == 1


@pytest.mark.anyio
async def test_output_checks_on_async_calls(aclient: openai.AsyncOpenAI) -> None:
    from veronica_mw import MaxLength, OutputRejected

    config = ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=3)
    async with ExecutionContext(config, checks=[MaxLength(10_000)]) as ctx:
        await _achat(aclient)
    async with ExecutionContext(config, checks=[MaxLength(10)]):
        with pytest.raises(OutputRejected):
            await _achat(aclient)
    assert ctx.graph.nodes()[0].status == "ok"
    await aclient.close()


def test_steps_say_which_gen_ai_operation_they_are(client: openai.OpenAI) -> None:
    with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0)) as ctx:
        client.embeddings.create(model="text-embedding-3-small", input=["a", "b"])
        _chat(client)
        client.responses.create(model=MODEL, input="hi")
    # What OpenTelemetry names the spans by ("embeddings text-embedding-3-small"; empty: "chat").
    assert [n.options.gen_ai_operation for n in ctx.graph.nodes()] == ["embeddings", "", ""]
