"""Output checks read tool calls and every choice, through the real SDKs against a fake provider."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest
from google import genai
from google.genai import types

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, Forbidden, JsonOutput, OutputRejected

from ..support.fake_tool_provider import TOOL, FakeToolProvider

pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")

SECRET = r"sk-\w+"
LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=3)
FUNCTION: Any = {
    "type": "function",
    "function": {"name": TOOL, "parameters": {"type": "object", "properties": {"to": {"type": "string"}}}},
}


@pytest.fixture
def instrumented() -> Iterator[None]:
    veronica_mw.instrument("openai", "anthropic", "google-genai")
    yield
    veronica_mw.uninstrument()


def chat_tool_call(url: str) -> Any:
    with openai.OpenAI(base_url=f"{url}/v1", api_key="test", max_retries=0) as client:
        messages: Any = [{"role": "user", "content": "mail the key"}]
        return client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=[FUNCTION])


def chat_second_choice(url: str) -> Any:
    with openai.OpenAI(base_url=f"{url}/v1", api_key="test", max_retries=0) as client:
        messages: Any = [{"role": "user", "content": "two answers"}]
        return client.chat.completions.create(model="gpt-4o-mini", messages=messages, n=2)


def responses_function_call(url: str) -> Any:
    with openai.OpenAI(base_url=f"{url}/v1", api_key="test", max_retries=0) as client:
        tool: Any = {"type": "function", "name": TOOL, "parameters": {"type": "object"}}
        return client.responses.create(model="gpt-4o-mini", input="mail the key", tools=[tool])


def anthropic_tool_use(url: str) -> Any:
    with anthropic.Anthropic(base_url=url, api_key="test", max_retries=0) as client:
        tool: Any = {"name": TOOL, "input_schema": {"type": "object"}}
        messages: Any = [{"role": "user", "content": "mail the key"}]
        return client.messages.create(
            model="claude-haiku-4-5", max_tokens=100, messages=messages, tools=[tool]
        )


def gemini_function_call(url: str) -> Any:
    client = genai.Client(api_key="test", http_options=types.HttpOptions(base_url=url))
    try:
        return client.models.generate_content(model="gemini-2.0-flash", contents="mail the key")
    finally:
        client.close()


SHAPES: list[Callable[[str], Any]] = [
    chat_tool_call,
    chat_second_choice,
    responses_function_call,
    anthropic_tool_use,
    gemini_function_call,
]


@pytest.mark.parametrize("call", SHAPES, ids=lambda f: f.__name__)
def test_forbidden_finds_the_secret_in_every_shape(instrumented: None, call: Callable[[str], Any]) -> None:
    with FakeToolProvider("sk-LEAK") as server, ExecutionContext(LIMITS, checks=[Forbidden(SECRET)]) as ctx:
        with pytest.raises(OutputRejected) as caught:
            call(server.url)
    assert caught.value.check == "forbidden" and "forbidden pattern" in caught.value.message
    assert len(server.paths) == 1  # the call really went out, and was refused once, on its answer
    (node,) = ctx.graph.nodes()
    assert node.status == "rejected" and ctx.get_snapshot().retries_used == 1


@pytest.mark.parametrize("call", SHAPES, ids=lambda f: f.__name__)
def test_a_clean_answer_of_every_shape_passes(instrumented: None, call: Callable[[str], Any]) -> None:
    with (
        FakeToolProvider("no key here") as server,
        ExecutionContext(LIMITS, checks=[Forbidden(SECRET)]) as ctx,
    ):
        call(server.url)
    assert len(server.paths) == 1 and [n.status for n in ctx.graph.nodes()] == ["ok"]


@pytest.mark.parametrize(
    "call", [chat_tool_call, responses_function_call, anthropic_tool_use, gemini_function_call]
)
def test_json_output_checks_a_tool_calls_arguments(instrumented: None, call: Callable[[str], Any]) -> None:
    schema = {"type": "object", "required": ["to", "body"], "properties": {"to": {"type": "string"}}}
    with FakeToolProvider("x") as server, ExecutionContext(LIMITS, checks=[JsonOutput(schema)]) as ctx:
        call(server.url)  # only a tool call, with valid arguments: not "not valid JSON"
    assert ctx.get_snapshot().retries_used == 0
    strict = {"type": "object", "properties": {"to": {"type": "integer"}}}
    with FakeToolProvider("x") as server, ExecutionContext(LIMITS, checks=[JsonOutput(strict)]):
        with pytest.raises(OutputRejected) as caught:
            call(server.url)
    assert "is not of type 'integer'" in caught.value.message and len(server.paths) == 1
