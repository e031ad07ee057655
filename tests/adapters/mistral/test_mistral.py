"""The Mistral SDK through its real client against a fake Mistral server: each chat completion is
one step, reserved at its worst case before it is sent, priced from the usage Mistral reported (in
the response or a stream's last event), or estimated when there is none."""

from __future__ import annotations

from typing import Any

import pytest
from mistralai.client import Mistral

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.kernel.pricing import TokenUsage, price_usage

from ...support.fake_mistral import REPLY, FakeMistral
from ...support.fake_provider import cost_of

MODEL = "mistral-small-latest"
MESSAGES: list[Any] = [{"role": "user", "content": "Say hello in a few words."}]
ARGS: dict[str, Any] = {"model": MODEL, "messages": MESSAGES, "max_tokens": 256}


def _config(**limits: Any) -> ExecutionConfig:
    return ExecutionConfig(**{"max_cost_usd": 1.0, "max_steps": 5, "max_retries_total": 0, **limits})


def test_max_steps_sends_exactly_that_many_requests(client: Mistral, server: FakeMistral) -> None:
    with ExecutionContext(_config(max_steps=3)) as ctx:
        client.chat.complete(**ARGS)
        client.chat.complete(**ARGS)
        assert "".join(str(e.data.choices[0].delta.content) for e in client.chat.stream(**ARGS)) == REPLY
        with pytest.raises(ExecutionHalted) as halted:
            client.chat.complete(**ARGS)
        with pytest.raises(ExecutionHalted):  # the halted context refuses before sending, again
            client.chat.stream(**ARGS)
    assert halted.value.reason == "step_limit"
    assert server.count() == 3
    assert [n.name for n in ctx.graph.nodes()] == ["mistral.chat"] * 3
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(cost_of(server.reported, "mistral"))
    assert [e.kind for e in ctx.get_events()].count("usage_estimated") == 0


def test_the_reservation_is_the_worst_case(client: Mistral, server: FakeMistral) -> None:
    worst = price_usage(TokenUsage(-(-len("user" + MESSAGES[0]["content"]) // 4), 256), MODEL, "mistral")
    with ExecutionContext(_config(max_cost_usd=worst * 0.99)), pytest.raises(ExecutionHalted, match="budget"):
        client.chat.complete(**ARGS)
    assert server.count() == 0  # refused before anything was sent
    with ExecutionContext(_config(max_cost_usd=worst * 1.01)) as ctx:
        client.chat.complete(**ARGS)
    (node,) = ctx.graph.nodes()
    assert node.reserved_usd == pytest.approx(worst)
    assert node.cost_usd == pytest.approx(cost_of(server.reported, "mistral")) and 0 < node.cost_usd < worst


def test_a_cancelled_context_sends_nothing(client: Mistral, server: FakeMistral) -> None:
    with ExecutionContext(_config()) as ctx:
        ctx.cancel("stop")
        with pytest.raises(ExecutionHalted, match="cancelled"):
            client.chat.complete(**ARGS)
    assert server.count() == 0


@pytest.mark.parametrize("stream", [False, True])
def test_missing_usage_is_estimated_never_free(instrumented: None, stream: bool) -> None:
    with FakeMistral(usage=False) as bare:
        client = Mistral(api_key="test", server_url=bare.url)
        with ExecutionContext(_config()) as ctx:
            if stream:
                list(client.chat.stream(**ARGS))
            else:
                client.chat.complete(**ARGS)
        assert bare.count() == 1 and bare.reported == []
    (node,) = ctx.graph.nodes()
    assert node.tokens_out == -(-len(REPLY) // 4)
    assert 0 < node.cost_usd < node.reserved_usd
    assert [e.kind for e in ctx.get_events()] == ["usage_estimated"]


@pytest.mark.anyio
async def test_async_calls_are_bounded(client: Mistral, server: FakeMistral) -> None:
    with ExecutionContext(_config(max_steps=2)) as ctx:
        await client.chat.complete_async(**ARGS)
        async for _ in await client.chat.stream_async(**ARGS):
            pass
        with pytest.raises(ExecutionHalted, match="step_limit"):
            await client.chat.complete_async(**ARGS)
    assert server.count() == 2
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(cost_of(server.reported, "mistral"))
    assert all(n.status == "ok" and n.cost_usd > 0 for n in ctx.graph.nodes())


def test_outside_a_context_and_after_uninstrument_calls_pass_through(server: FakeMistral) -> None:
    assert "mistral" in veronica_mw.instrument()  # the default set includes the Mistral SDK
    try:
        client = Mistral(api_key="test", server_url=server.url)
        client.chat.complete(**ARGS)  # no context: straight through
        veronica_mw.uninstrument()
        with ExecutionContext(_config(max_steps=1)) as ctx:
            client.chat.complete(**ARGS)
            client.chat.complete(**ARGS)  # not instrumented: not steps
    finally:
        veronica_mw.uninstrument()
    assert server.count() == 3 and ctx.graph.nodes() == []
