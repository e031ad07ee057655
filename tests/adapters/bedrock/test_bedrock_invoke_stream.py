"""Bedrock ``invoke_model_with_response_stream`` through boto3's real client: one step per stream,
priced from the invocation metrics of its last chunk, estimated from the streamed text of the
model's own events (Anthropic, Nova, Llama) when they are missing, and cut at its reservation."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters._provider_estimate import text_tokens
from veronica_mw.kernel.pricing import TokenUsage, price_usage

from ...support.fake_bedrock import REPLY, FakeBedrock
from ...support.fake_provider import cost_of

CLAUDE = "anthropic.claude-3-haiku-20240307-v1:0"
NOVA = "amazon.nova-lite-v1:0"
LLAMA = "meta.llama3-8b-instruct-v1:0"
MISTRAL = "mistral.mistral-7b-instruct-v0:2"  # its stream events have a shape the adapter does not know
MESSAGES: list[Any] = [{"role": "user", "content": [{"type": "text", "text": "Say hello in a few words."}]}]
BODIES: dict[str, dict[str, Any]] = {
    CLAUDE: {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 300, "messages": MESSAGES},
    NOVA: {
        "messages": [{"role": "user", "content": [{"text": "Hi."}]}],
        "inferenceConfig": {"max_new_tokens": 300},
    },
    LLAMA: {"prompt": "Say hello in a few words.", "max_gen_len": 300},
    MISTRAL: {"prompt": "<s>[INST] Say hello. [/INST]", "max_tokens": 300},
}


def _config(**limits: Any) -> ExecutionConfig:
    return ExecutionConfig(**{"max_cost_usd": 1.0, "max_steps": 5, "max_retries_total": 0, **limits})


def _text(client: Any, model: str, body: dict[str, Any], into: list[str] | None = None) -> str:
    parts = into if into is not None else []
    response = client.invoke_model_with_response_stream(modelId=model, body=json.dumps(body))
    for event in response["body"]:
        chunk = json.loads(event["chunk"]["bytes"])
        delta = chunk.get("delta") or chunk.get("contentBlockDelta", {}).get("delta") or {}
        outputs = chunk.get("outputs") or [{}]
        parts.append(delta.get("text") or chunk.get("generation") or outputs[0].get("text") or "")
    return "".join(parts)


def test_max_steps_sends_exactly_that_many_streams(client: Any, server: FakeBedrock) -> None:
    with ExecutionContext(_config(max_steps=2)) as ctx:
        assert _text(client, CLAUDE, BODIES[CLAUDE]) == REPLY
        assert _text(client, CLAUDE, BODIES[CLAUDE]) == REPLY
        with pytest.raises(ExecutionHalted, match="step_limit"):
            _text(client, CLAUDE, BODIES[CLAUDE])
    assert server.count() == 2
    assert [n.name for n in ctx.graph.nodes()] == ["bedrock.invoke_model_with_response_stream"] * 2
    worst = price_usage(TokenUsage(text_tokens(MESSAGES), 300), CLAUDE, "aws")
    assert [n.reserved_usd for n in ctx.graph.nodes()] == pytest.approx([worst, worst])


@pytest.mark.parametrize("model", [CLAUDE, NOVA, LLAMA])
def test_priced_from_the_invocation_metrics(client: Any, server: FakeBedrock, model: str) -> None:
    with ExecutionContext(_config()) as ctx:
        assert _text(client, model, BODIES[model]) == REPLY
    (node,) = ctx.graph.nodes()
    (reported,) = server.reported
    assert (node.tokens_in, node.tokens_out) == (reported.input_tokens, reported.output_tokens)
    assert node.cost_usd == pytest.approx(cost_of(server.reported, "aws")) and ctx.get_events() == []


@pytest.mark.parametrize(("model", "extra"), [(CLAUDE, 0), (NOVA, 0), (LLAMA, 0), (MISTRAL, len("stop"))])
def test_no_metrics_is_estimated_from_the_streamed_text(
    instrumented: None, make_client: Callable[[str], Any], model: str, extra: int
) -> None:
    with FakeBedrock(usage=False) as bare:
        client = make_client(bare.url)
        with ExecutionContext(_config()) as ctx:
            assert _text(client, model, BODIES[model]) == REPLY
    (node,) = ctx.graph.nodes()
    assert node.tokens_out == -(-(len(REPLY) + extra) // 4)  # an unknown shape: every string counted
    assert 0 < node.cost_usd < node.reserved_usd
    assert node.reserved_usd == pytest.approx(price_usage(TokenUsage(node.tokens_in, 300), model, "aws"))
    assert [e.kind for e in ctx.get_events()] == ["usage_estimated"]


def test_an_invoke_stream_is_cut_at_its_reservation(
    instrumented: None, make_client: Callable[[str], Any]
) -> None:
    long_reply = " ".join(f"word{i}" for i in range(400))
    with FakeBedrock(reply=long_reply) as fake:
        client = make_client(fake.url)
        received: list[str] = []
        with ExecutionContext(_config()) as ctx, pytest.raises(ExecutionHalted, match="budget_exceeded"):
            _text(client, CLAUDE, {**BODIES[CLAUDE], "max_tokens": 20}, received)
        assert fake.count() == 1
    text = "".join(received)
    assert long_reply.startswith(text) and 80 < len(text) <= 80 + len("word399 ")
    (node,) = ctx.graph.nodes()
    assert node.cost_usd == pytest.approx(node.reserved_usd)
