"""The Groq SDK through its real client against a fake Groq server: each chat completion is one
step, reserved at its worst case before it is sent, priced from the usage Groq reported (in the
response, in a stream's ``x_groq.usage``, or estimated when there is none)."""

from __future__ import annotations

from typing import Any

import groq
import pytest

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.kernel.pricing import TokenUsage, price_usage

from ...support.fake_groq import REPLY, FakeGroq
from ...support.fake_provider import cost_of

MODEL = "llama-3.3-70b-versatile"
MESSAGES: list[Any] = [{"role": "user", "content": "Say hello in a few words."}]
ARGS: dict[str, Any] = {"model": MODEL, "messages": MESSAGES, "max_completion_tokens": 256}


def test_max_steps_sends_exactly_that_many_requests(client: groq.Groq, server: FakeGroq) -> None:
    with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=3, max_retries_total=0)) as ctx:
        for _ in range(3):
            assert client.chat.completions.create(**ARGS).choices[0].message.content == REPLY
        with pytest.raises(ExecutionHalted) as halted:
            client.chat.completions.create(**ARGS)
        with pytest.raises(ExecutionHalted):  # the halted context refuses before sending, again
            client.chat.completions.create(**ARGS, stream=True)
    assert halted.value.reason == "step_limit"
    assert server.count() == 3
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(cost_of(server.reported, "groq"))
    assert [n.name for n in ctx.graph.nodes()] == ["groq.chat.completions"] * 3


def test_the_reservation_is_the_worst_case(client: groq.Groq, server: FakeGroq) -> None:
    worst = price_usage(TokenUsage(-(-len("user" + MESSAGES[0]["content"]) // 4), 256), MODEL, "groq")
    config = ExecutionConfig(max_cost_usd=worst * 0.99, max_steps=5, max_retries_total=0)
    with ExecutionContext(config), pytest.raises(ExecutionHalted, match="budget_exceeded"):
        client.chat.completions.create(**ARGS)
    assert server.count() == 0  # refused before anything was sent
    with ExecutionContext(
        ExecutionConfig(max_cost_usd=worst * 1.01, max_steps=5, max_retries_total=0)
    ) as ctx:
        client.chat.completions.create(**ARGS)
    (node,) = ctx.graph.nodes()
    assert node.reserved_usd == pytest.approx(worst)
    assert node.cost_usd == pytest.approx(cost_of(server.reported, "groq")) and 0 < node.cost_usd < worst


def test_a_cancelled_context_sends_nothing(client: groq.Groq, server: FakeGroq) -> None:
    with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0)) as ctx:
        ctx.cancel("stop")
        with pytest.raises(ExecutionHalted, match="cancelled"):
            client.chat.completions.create(**ARGS)
    assert server.count() == 0


@pytest.mark.parametrize("include_usage", [False, True])
def test_streams_are_priced_from_their_last_chunk(
    client: groq.Groq, server: FakeGroq, include_usage: bool
) -> None:
    extra: dict[str, Any] = (
        {"extra_body": {"stream_options": {"include_usage": True}}} if include_usage else {}
    )
    with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0)) as ctx:
        stream = client.chat.completions.create(**ARGS, stream=True, **extra)
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == REPLY and server.count() == 1
    (node,) = ctx.graph.nodes()
    assert node.status == "ok" and node.tokens_out == len(REPLY.split())
    assert node.cost_usd == pytest.approx(cost_of(server.reported, "groq")) and node.cost_usd > 0
    assert [e.kind for e in ctx.get_events()] == []


@pytest.mark.parametrize("stream", [False, True])
def test_missing_usage_is_estimated_never_free(instrumented: None, stream: bool) -> None:
    with FakeGroq(usage=False) as bare, groq.Groq(base_url=bare.url, api_key="test", max_retries=0) as client:
        with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0)) as ctx:
            result = client.chat.completions.create(**ARGS, stream=stream)
            if stream:
                list(result)
        assert bare.count() == 1 and bare.reported == []
    (node,) = ctx.graph.nodes()
    assert node.tokens_out == -(-len(REPLY) // 4)
    assert 0 < node.cost_usd < node.reserved_usd
    assert [e.kind for e in ctx.get_events()] == ["usage_estimated"]


def test_retries_draw_from_the_budget_and_a_refused_retry_is_not_sent(
    server: FakeGroq, instrumented: None
) -> None:
    with groq.Groq(base_url=server.url, api_key="test", max_retries=4) as client:
        server.fail_next(1, 500)
        with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=1)) as ctx:
            client.chat.completions.create(**ARGS)
            assert ctx.get_snapshot().retries_used == 1 and server.count() == 2
            server.fail_next(3, 429)
            with pytest.raises(ExecutionHalted) as halted:
                client.chat.completions.create(**ARGS)
    assert halted.value.reason == "retry_limit"
    assert server.count() == 3


@pytest.mark.anyio
async def test_async_client_is_bounded(server: FakeGroq, instrumented: None) -> None:
    client = groq.AsyncGroq(base_url=server.url, api_key="test", max_retries=0)
    with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=2, max_retries_total=0)) as ctx:
        await client.chat.completions.create(**ARGS)
        stream = await client.chat.completions.create(**ARGS, stream=True)
        async for _ in stream:
            pass
        with pytest.raises(ExecutionHalted, match="step_limit"):
            await client.chat.completions.create(**ARGS)
    await client.close()
    assert server.count() == 2
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(cost_of(server.reported, "groq"))


def test_outside_a_context_and_after_uninstrument_calls_pass_through(server: FakeGroq) -> None:
    assert "groq" in veronica_mw.instrument()  # the default set includes the Groq SDK
    try:
        with groq.Groq(base_url=server.url, api_key="test", max_retries=0) as client:
            client.chat.completions.create(**ARGS)  # no context: straight through
            veronica_mw.uninstrument()
            with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=1, max_retries_total=0)) as ctx:
                client.chat.completions.create(**ARGS)
                client.chat.completions.create(**ARGS)  # not instrumented: not counted as steps
    finally:
        veronica_mw.uninstrument()
    assert server.count() == 3 and ctx.graph.nodes() == []
