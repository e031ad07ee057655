"""Bedrock ``converse_stream`` through boto3's real client against a fake runtime that speaks the
AWS event-stream framing: each stream is one step, admitted before the request is sent, priced
from the ``metadata`` event's usage (estimated from the streamed text and toolUse input when there
is none) and cut at its reservation with the part received delivered."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.kernel.pricing import TokenUsage, price_usage

from ...support.fake_bedrock import REPLY, FakeBedrock
from ...support.fake_provider import cost_of

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
MESSAGES: list[Any] = [{"role": "user", "content": [{"text": "Say hello in a few words."}]}]
ARGS: dict[str, Any] = {"modelId": MODEL, "messages": MESSAGES, "inferenceConfig": {"maxTokens": 256}}
TOOL_INPUT = '{"city": "Paris", "days": 3, "units": "metric"}'


def _config(**limits: Any) -> ExecutionConfig:
    return ExecutionConfig(**{"max_cost_usd": 1.0, "max_steps": 5, "max_retries_total": 0, **limits})


def _text(response: dict[str, Any], into: list[str] | None = None) -> str:
    parts = into if into is not None else []
    for event in response["stream"]:
        delta = event.get("contentBlockDelta", {}).get("delta", {})
        if "text" in delta:
            parts.append(delta["text"])
    return "".join(parts)


def test_max_steps_sends_exactly_that_many_streams(client: Any, server: FakeBedrock) -> None:
    with ExecutionContext(_config(max_steps=3)) as ctx:
        for _ in range(3):
            assert _text(client.converse_stream(**ARGS)) == REPLY
        with pytest.raises(ExecutionHalted) as halted:
            client.converse_stream(**ARGS)
    assert halted.value.reason == "step_limit"
    assert server.count() == 3
    assert [n.name for n in ctx.graph.nodes()] == ["bedrock.converse_stream"] * 3
    assert [r.streamed for r in server.reported] == [True] * 3
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(cost_of(server.reported, "aws"))


def test_priced_from_the_metadata_usage_and_refused_over_budget(client: Any, server: FakeBedrock) -> None:
    prompt = -(-len("user" + MESSAGES[0]["content"][0]["text"]) // 4)
    worst = price_usage(TokenUsage(prompt, 256), MODEL, "aws")
    with ExecutionContext(_config(max_cost_usd=worst * 0.99)), pytest.raises(ExecutionHalted, match="budget"):
        client.converse_stream(**ARGS)
    assert server.count() == 0  # refused before the request left
    with ExecutionContext(_config(max_cost_usd=worst * 1.01)) as ctx:
        _text(client.converse_stream(**ARGS))
    (node,) = ctx.graph.nodes()
    (reported,) = server.reported
    assert node.reserved_usd == pytest.approx(worst)
    assert (node.tokens_in, node.tokens_out) == (reported.input_tokens, reported.output_tokens)
    assert node.cost_usd == pytest.approx(cost_of(server.reported, "aws")) and 0 < node.cost_usd < worst
    assert ctx.get_events() == []


def test_no_usage_is_estimated_from_text_and_tool_input(
    instrumented: None, make_client: Callable[[str], Any]
) -> None:
    with FakeBedrock(usage=False, tool_input=TOOL_INPUT) as bare:
        client = make_client(bare.url)
        with ExecutionContext(_config()) as ctx:
            response = client.converse_stream(**ARGS)
            inputs = [
                e["contentBlockDelta"]["delta"]["toolUse"]["input"]
                for e in response["stream"]
                if "toolUse" in e.get("contentBlockDelta", {}).get("delta", {})
            ]
        assert "".join(inputs) == TOOL_INPUT and bare.count() == 1 and bare.reported == []
    (node,) = ctx.graph.nodes()
    assert node.tokens_out == -(-(len(REPLY) + len("lookup") + len(TOOL_INPUT)) // 4)
    assert 0 < node.cost_usd < node.reserved_usd
    assert [e.kind for e in ctx.get_events()] == ["usage_estimated"]


def test_a_stream_is_cut_at_its_reservation_with_the_partial_text_delivered(
    instrumented: None, make_client: Callable[[str], Any]
) -> None:
    long_reply = " ".join(f"word{i}" for i in range(400))  # a model that ignores maxTokens
    with FakeBedrock(reply=long_reply) as fake:
        client = make_client(fake.url)
        received: list[str] = []
        with ExecutionContext(_config()) as ctx:
            response = client.converse_stream(**{**ARGS, "inferenceConfig": {"maxTokens": 20}})
            with pytest.raises(ExecutionHalted) as halted:
                _text(response, received)
            with pytest.raises(ExecutionHalted):  # the context is halted: nothing more is sent
                client.converse_stream(**ARGS)
        assert fake.count() == 1
    text = "".join(received)
    assert halted.value.reason == "budget_exceeded"
    assert long_reply.startswith(text) and 80 < len(text) <= 80 + len("word399 ")
    (node,) = ctx.graph.nodes()
    assert node.cost_usd == pytest.approx(node.reserved_usd)  # sent and cut: its reservation is kept
    assert [e.kind for e in ctx.get_events()][-1:] == ["stream_cut"]


def test_an_abandoned_stream_keeps_its_reservation(client: Any, server: FakeBedrock) -> None:
    with ExecutionContext(_config()) as ctx:
        response = client.converse_stream(**ARGS)
        next(iter(response["stream"]))  # read one event, then leave it
    (node,) = ctx.graph.nodes()
    assert server.count() == 1 and node.reserved_usd > 0
    assert node.cost_usd == pytest.approx(node.reserved_usd)  # sent, never read to its end
