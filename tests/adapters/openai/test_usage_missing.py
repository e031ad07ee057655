"""Usage missing -> estimated, never $0: what streamed (text and tool-call arguments, every choice)
is charged, with a ``usage_estimated`` event; through the real OpenAI SDK against a server that
reports no usage."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

import veronica_mw
from veronica_mw import CallNode, ExecutionConfig, ExecutionContext

from ...support.fake_bare import BareProvider

MODEL = "gpt-4o-mini"
MESSAGES: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
    }
]
LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0)


@pytest.fixture
def bare() -> Iterator[BareProvider]:
    with BareProvider(tool=True) as fake:
        yield fake


@pytest.fixture
def client(bare: BareProvider) -> Iterator[openai.OpenAI]:
    veronica_mw.instrument("openai")
    with openai.OpenAI(base_url=bare.url + "/v1", api_key="test", max_retries=0) as sdk:
        yield sdk
    veronica_mw.uninstrument()


def _only(ctx: ExecutionContext) -> CallNode:
    (node,) = ctx.graph.nodes()
    return node


def _estimated(ctx: ExecutionContext, output_chars: int) -> None:
    node = _only(ctx)
    assert node.tokens_out == -(-output_chars // 4) > 0
    assert 0.0 < node.cost_usd < node.reserved_usd
    assert [e.kind for e in ctx.get_events()] == ["usage_estimated"]


def test_chat_stream_of_tool_calls_is_charged_for_their_arguments(
    client: openai.OpenAI, bare: BareProvider
) -> None:
    with ExecutionContext(LIMITS) as ctx:
        stream = client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS, stream=True)
        arguments = "".join(
            call.function.arguments or ""
            for chunk in stream
            for choice in chunk.choices
            for call in choice.delta.tool_calls or ()
            if call.function is not None
        )
    assert arguments == bare.arguments and bare.count() == 1
    _estimated(ctx, len("get_weather") + len(arguments))


def test_every_choice_of_a_stream_is_charged(client: openai.OpenAI, bare: BareProvider) -> None:
    with ExecutionContext(LIMITS) as ctx:
        stream = client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS, stream=True, n=3)
        indexes = {choice.index for chunk in stream for choice in chunk.choices}
    assert indexes == {0, 1, 2}
    _estimated(ctx, 3 * (len("get_weather") + len(bare.arguments)))


def test_chat_response_of_tool_calls_without_usage_is_charged_for_them(
    client: openai.OpenAI, bare: BareProvider
) -> None:
    with ExecutionContext(LIMITS) as ctx:
        reply = client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS, n=2)
    assert reply.usage is None and len(reply.choices) == 2
    _estimated(ctx, 2 * (len("get_weather") + len(bare.arguments)))


def test_responses_stream_of_a_function_call_is_charged_for_its_arguments(
    client: openai.OpenAI, bare: BareProvider
) -> None:
    with ExecutionContext(LIMITS) as ctx:
        events = list(client.responses.create(model=MODEL, input="weather?", stream=True))
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert "".join(deltas) == bare.arguments
    _estimated(ctx, len("get_weather") + len(bare.arguments))


def test_responses_result_of_a_function_call_without_usage_is_charged(
    client: openai.OpenAI, bare: BareProvider
) -> None:
    with ExecutionContext(LIMITS) as ctx:
        response = client.responses.create(model=MODEL, input="weather?")
    assert response.usage is None
    _estimated(ctx, len("get_weather") + len(bare.arguments))


def test_text_stream_without_usage_is_estimated_from_its_text() -> None:
    with BareProvider(words=40) as bare:
        veronica_mw.instrument("openai")
        try:
            with openai.OpenAI(base_url=bare.url + "/v1", api_key="test", max_retries=0) as sdk:
                with ExecutionContext(LIMITS) as ctx:
                    text = "".join(
                        c.choices[0].delta.content or ""
                        for c in sdk.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
                        if c.choices
                    )
        finally:
            veronica_mw.uninstrument()
    assert text == bare.text()
    _estimated(ctx, len(text))
