"""Anthropic streams and messages without usage are estimated from what was generated: text and
tool-use JSON (``input_json_delta``), never the ``message_start`` placeholder, never $0."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

import veronica_mw
from veronica_mw import CallNode, ExecutionConfig, ExecutionContext

from ...support.fake_bare import BareProvider

MODEL = "claude-haiku-4-5"
MESSAGES: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0)


@pytest.fixture
def bare() -> Iterator[BareProvider]:
    with BareProvider(tool=True) as fake:
        yield fake


@pytest.fixture
def client(bare: BareProvider) -> Iterator[anthropic.Anthropic]:
    veronica_mw.instrument("anthropic")
    with anthropic.Anthropic(base_url=bare.url, api_key="test", max_retries=0) as sdk:
        yield sdk
    veronica_mw.uninstrument()


def _only(ctx: ExecutionContext) -> CallNode:
    (node,) = ctx.graph.nodes()
    return node


def test_stream_of_tool_use_is_charged_for_its_json(client: anthropic.Anthropic, bare: BareProvider) -> None:
    with ExecutionContext(LIMITS) as ctx:
        stream = client.messages.create(model=MODEL, max_tokens=1000, messages=MESSAGES, stream=True)
        partial = "".join(
            e.delta.partial_json
            for e in stream
            if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
        )
    assert partial == bare.arguments
    node = _only(ctx)
    assert node.tokens_out == -(-(len("get_weather") + len(partial)) // 4)
    assert 0.0 < node.cost_usd < node.reserved_usd
    assert [e.kind for e in ctx.get_events()] == ["usage_estimated"]


def test_message_of_tool_use_without_usage_is_charged_for_its_input(
    client: anthropic.Anthropic, bare: BareProvider
) -> None:
    with ExecutionContext(LIMITS) as ctx:
        client.messages.with_raw_response.create(model=MODEL, max_tokens=1000, messages=MESSAGES).parse()
    node = _only(ctx)
    arguments = json.dumps(json.loads(bare.arguments))
    assert node.tokens_out == -(-(len("get_weather") + len(arguments)) // 4)
    assert node.cost_usd > 0.0 and [e.kind for e in ctx.get_events()] == ["usage_estimated"]
