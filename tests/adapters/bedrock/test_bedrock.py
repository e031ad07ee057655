"""Bedrock ``converse`` through boto3's real client against a fake Bedrock runtime: each call is
one step, admitted through botocore's event hooks before anything is sent, reserved at its worst
case and priced from the usage Bedrock reported (estimated when there is none)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters.bedrock import instrument_client, instrumented
from veronica_mw.kernel.pricing import TokenUsage, price_usage

from ...support.fake_bedrock import REPLY, FakeBedrock
from ...support.fake_provider import cost_of

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
MESSAGES: list[Any] = [{"role": "user", "content": [{"text": "Say hello in a few words."}]}]
ARGS: dict[str, Any] = {"modelId": MODEL, "messages": MESSAGES, "inferenceConfig": {"maxTokens": 256}}


def _config(**limits: Any) -> ExecutionConfig:
    return ExecutionConfig(**{"max_cost_usd": 1.0, "max_steps": 5, "max_retries_total": 0, **limits})


def test_max_steps_sends_exactly_that_many_requests(client: Any, server: FakeBedrock) -> None:
    with ExecutionContext(_config(max_steps=3)) as ctx:
        for _ in range(3):
            assert client.converse(**ARGS)["output"]["message"]["content"][0]["text"] == REPLY
        with pytest.raises(ExecutionHalted) as halted:
            client.converse(**ARGS)
        with pytest.raises(ExecutionHalted):  # the halted context refuses before sending, again
            client.converse(**ARGS)
    assert halted.value.reason == "step_limit"
    assert server.count() == 3
    assert [n.name for n in ctx.graph.nodes()] == ["bedrock.converse"] * 3
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(cost_of(server.reported, "aws"))


def test_the_reservation_is_the_worst_case(client: Any, server: FakeBedrock) -> None:
    prompt = -(-len("user" + MESSAGES[0]["content"][0]["text"]) // 4)
    worst = price_usage(TokenUsage(prompt, 256), MODEL, "aws")
    with ExecutionContext(_config(max_cost_usd=worst * 0.99)), pytest.raises(ExecutionHalted, match="budget"):
        client.converse(**ARGS)
    assert server.count() == 0  # refused before anything was sent
    with ExecutionContext(_config(max_cost_usd=worst * 1.01)) as ctx:
        client.converse(**ARGS)
    (node,) = ctx.graph.nodes()
    assert node.reserved_usd == pytest.approx(worst)
    assert node.cost_usd == pytest.approx(cost_of(server.reported, "aws")) and 0 < node.cost_usd < worst


def test_missing_usage_is_estimated_never_free(instrumented: None, make_client: Callable[[str], Any]) -> None:
    with FakeBedrock(usage=False) as bare:
        client = make_client(bare.url)
        with ExecutionContext(_config()) as ctx:
            client.converse(**ARGS)
        assert bare.count() == 1 and bare.reported == []
    (node,) = ctx.graph.nodes()
    assert node.tokens_out == -(-len(REPLY) // 4)
    assert 0 < node.cost_usd < node.reserved_usd
    assert [e.kind for e in ctx.get_events()] == ["usage_estimated"]


def test_a_client_made_before_instrument_is_added_explicitly(
    server: FakeBedrock, make_client: Callable[[str], Any]
) -> None:
    client = make_client(server.url)  # before instrument(): no handlers yet
    with ExecutionContext(_config(max_steps=1)) as ctx:
        client.converse(**ARGS)
        client.converse(**ARGS)
    assert ctx.graph.nodes() == [] and server.count() == 2
    instrument_client(client)
    with ExecutionContext(_config(max_steps=1)), pytest.raises(ExecutionHalted, match="step_limit"):
        client.converse(**ARGS)
        client.converse(**ARGS)
    assert server.count() == 3


def test_outside_a_context_calls_pass_through(client: Any, server: FakeBedrock) -> None:
    client.converse(**ARGS)
    assert server.count() == 1 and instrumented()
    veronica_mw.uninstrument()
    assert not instrumented()
