"""Bedrock ``invoke_model`` through boto3's real client: the model's own JSON body (Anthropic
messages, Amazon Nova, Meta Llama, an unknown shape) is one step, reserved from the body's output
limit, priced from Bedrock's token-count headers or the body's usage, estimated when neither is
there, and the caller still reads the body it got."""

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
MISTRAL = "mistral.mistral-7b-instruct-v0:2"  # its answer has a shape the adapter does not know
MESSAGES: list[Any] = [{"role": "user", "content": [{"type": "text", "text": "Say hello in a few words."}]}]
ANTHROPIC_BODY = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 300, "messages": MESSAGES}
NOVA_BODY = {
    "messages": [{"role": "user", "content": [{"text": "Say hello."}]}],
    "inferenceConfig": {"max_new_tokens": 200},
}


def _config(**limits: Any) -> ExecutionConfig:
    return ExecutionConfig(**{"max_cost_usd": 1.0, "max_steps": 5, "max_retries_total": 0, **limits})


def _invoke(client: Any, model: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.invoke_model(modelId=model, body=json.dumps(body), contentType="application/json")
    parsed: dict[str, Any] = json.loads(response["body"].read())  # the caller still gets the body
    return parsed


def test_anthropic_body_bounded_and_priced_from_the_headers(client: Any, server: FakeBedrock) -> None:
    with ExecutionContext(_config(max_steps=2)) as ctx:
        for _ in range(2):
            assert _invoke(client, CLAUDE, ANTHROPIC_BODY)["content"][0]["text"] == REPLY
        with pytest.raises(ExecutionHalted, match="step_limit"):
            _invoke(client, CLAUDE, ANTHROPIC_BODY)
    assert server.count() == 2
    nodes = ctx.graph.nodes()
    assert [n.name for n in nodes] == ["bedrock.invoke_model"] * 2
    worst = price_usage(TokenUsage(text_tokens(MESSAGES), 300), CLAUDE, "aws")
    assert [n.reserved_usd for n in nodes] == pytest.approx([worst, worst])
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(cost_of(server.reported, "aws"))
    assert ctx.get_events() == []


def test_refused_before_sending_when_the_worst_case_does_not_fit(client: Any, server: FakeBedrock) -> None:
    worst = price_usage(TokenUsage(text_tokens(MESSAGES), 300), CLAUDE, "aws")
    with ExecutionContext(_config(max_cost_usd=worst * 0.99)), pytest.raises(ExecutionHalted, match="budget"):
        _invoke(client, CLAUDE, ANTHROPIC_BODY)
    assert server.count() == 0


@pytest.mark.parametrize(("model", "body"), [(CLAUDE, ANTHROPIC_BODY), (NOVA, NOVA_BODY)])
def test_usage_read_from_the_body_without_headers(
    instrumented: None, make_client: Callable[[str], Any], model: str, body: dict[str, Any]
) -> None:
    with FakeBedrock(usage_headers=False) as fake:
        client = make_client(fake.url)
        with ExecutionContext(_config()) as ctx:
            _invoke(client, model, body)
        (reported,) = fake.reported
    (node,) = ctx.graph.nodes()
    assert (node.tokens_in, node.tokens_out) == (reported.input_tokens, reported.output_tokens)
    assert node.cost_usd == pytest.approx(cost_of([reported], "aws")) and ctx.get_events() == []


def test_nova_reserves_its_max_new_tokens(client: Any, server: FakeBedrock) -> None:
    with ExecutionContext(_config()) as ctx:
        _invoke(client, NOVA, NOVA_BODY)
    (node,) = ctx.graph.nodes()
    worst = price_usage(TokenUsage(text_tokens(NOVA_BODY["messages"]), 200), NOVA, "aws")
    assert node.reserved_usd == pytest.approx(worst)


def test_missing_usage_is_estimated_never_free(instrumented: None, make_client: Callable[[str], Any]) -> None:
    llama_body = {"prompt": "Say hello in a few words.", "max_gen_len": 128}
    odd_body = {"inputs": [{"question": "Say hello."}], "parameters": {"length": 64}}  # a shape not known
    with FakeBedrock(usage=False) as bare:
        client = make_client(bare.url)
        with ExecutionContext(_config()) as ctx:
            assert _invoke(client, LLAMA, llama_body)["generation"] == REPLY
            _invoke(client, MISTRAL, odd_body)
        assert bare.count() == 2 and bare.reported == []
    known, unknown = ctx.graph.nodes()
    assert (known.tokens_in, known.tokens_out) == (text_tokens(llama_body["prompt"]), -(-len(REPLY) // 4))
    assert unknown.tokens_in == text_tokens(odd_body)
    assert unknown.tokens_out == -(-(len(REPLY) + len("stop")) // 4)  # every string of an unknown answer
    assert all(0 < n.cost_usd < n.reserved_usd for n in (known, unknown))
    assert [e.kind for e in ctx.get_events()] == ["usage_estimated"] * 2
