"""The built-in checks and the text ModelOutput reads from each SDK's response shapes."""

from __future__ import annotations

import re
from typing import Any

import pydantic
import pytest

from veronica_mw import CheckResult, Forbidden, JsonOutput, MaxLength, ModelOutput
from veronica_mw.control import extract_text


def out(text: str) -> ModelOutput:
    return ModelOutput(text)


class Answer(pydantic.BaseModel):
    city: str
    temperature: float


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temperature": {"type": "number"}},
    "required": ["city", "temperature"],
}


def test_json_output_without_schema() -> None:
    check = JsonOutput()
    assert check(out('{"a": [1, 2]}')) == CheckResult(True, "json_output")
    assert check(out("```json\n[1, 2]\n```")).passed  # one fence around the whole answer
    bad = check(out("{'a': 1}"))
    assert not bad.passed and bad.message.startswith("not valid JSON: Expecting property name")
    assert not check(out("")).passed
    assert not check(out("Sure! ```json\n[1]\n``` hope that helps")).passed


def test_json_output_with_a_json_schema() -> None:
    check = JsonOutput(SCHEMA)
    assert check(out('{"city": "Oslo", "temperature": -3.5}')).passed
    bad = check(out('{"city": "Oslo", "temperature": "cold"}'))
    assert not bad.passed
    assert bad.message == "JSON does not match the schema at /temperature: 'cold' is not of type 'number'"
    missing = check(out('{"city": "Oslo"}'))
    assert "'temperature' is a required property" in missing.message
    with pytest.raises(Exception, match="is not valid under any of the given schemas|is not of type"):
        JsonOutput({"type": 12})  # a broken schema fails at construction


def test_json_output_with_a_pydantic_model() -> None:
    check = JsonOutput(Answer)
    assert check(out('{"city": "Oslo", "temperature": 1}')).passed
    bad = check(out('{"city": "Oslo"}'))
    assert not bad.passed and bad.message == "JSON does not match Answer: temperature: Field required"
    with pytest.raises(TypeError, match="JSON Schema dict or a pydantic model class"):
        JsonOutput("object")  # type: ignore[arg-type]


def test_max_length() -> None:
    assert MaxLength(5)(out("12345")).passed
    assert MaxLength(5)(out("123456")) == CheckResult(False, "max_length", "6 characters, more than 5")
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError):
            MaxLength(bad)  # type: ignore[arg-type]


def test_forbidden() -> None:
    check = Forbidden(r"\bpassword\b", re.compile(r"sk-[A-Za-z0-9]{8,}"))
    assert check(out("all fine")).passed
    assert check(out("the key is sk-abcdefgh1234")).message == (
        "matches the forbidden pattern 'sk-[A-Za-z0-9]{8,}'"
    )
    assert not Forbidden("secret", flags=re.IGNORECASE)(out("SECRET plans")).passed
    with pytest.raises(re.error):
        Forbidden("(unclosed")
    with pytest.raises(ValueError):
        Forbidden()


# Response shapes as the SDKs serialise them (the real objects are exercised in the adapter envs).
OPENAI_CHAT = {"choices": [{"message": {"role": "assistant", "content": "chat text"}}], "usage": {}}
OPENAI_PARTS = {
    "choices": [{"message": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}]
}
OPENAI_COMPLETION = {"choices": [{"text": "legacy text"}]}
OPENAI_RESPONSES = {
    "output": [
        {"type": "reasoning", "summary": []},
        {"type": "message", "content": [{"type": "output_text", "text": "responses text"}]},
    ]
}
ANTHROPIC = {
    "content": [
        {"type": "thinking", "thinking": "hmm"},
        {"type": "text", "text": "anthropic "},
        {"type": "tool_use", "name": "x", "input": {}},
        {"type": "text", "text": "text"},
    ]
}


class SDKObject:
    """Attribute access, as SDK response objects offer it."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        ("plain", "plain"),
        (b"bytes", "bytes"),
        (None, ""),
        (OPENAI_CHAT, "chat text"),
        (OPENAI_PARTS, "ab"),
        (OPENAI_COMPLETION, "legacy text"),
        (OPENAI_RESPONSES, "responses text"),
        (SDKObject(output_text="sdk responses text", output=[]), "sdk responses text"),
        (ANTHROPIC, "anthropic text"),
        (SDKObject(content=[SDKObject(type="text", text="anthropic object")]), "anthropic object"),
        (SDKObject(choices=[SDKObject(message=SDKObject(content="chat object"))]), "chat object"),
        ({"role": "assistant", "content": "ag2 reply"}, "ag2 reply"),
        (SDKObject(message=SDKObject(content="llamaindex chat")), "llamaindex chat"),
        (SDKObject(text="completion response"), "completion response"),
        (SDKObject(generations=[[SDKObject(text="llm result")]]), "llm result"),
    ],
)
def test_text_extraction(raw: Any, text: str) -> None:
    assert extract_text(raw) == text
    assert ModelOutput(raw).text == text


class Opaque:
    """A result no reader knows, whose repr would leak what it holds."""

    def __repr__(self) -> str:
        return "Opaque(sk-LEAKED)"


@pytest.mark.parametrize(
    ("raw", "calls"),
    [
        (
            {
                "choices": [
                    {
                        "message": {
                            "content": None,
                            "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}],
                        }
                    }
                ]
            },
            [("f", "{}")],
        ),
        ({"output": [{"type": "function_call", "name": "g", "arguments": '{"a": 1}'}]}, [("g", '{"a": 1}')]),
        ({"content": [{"type": "tool_use", "name": "h", "input": {"b": 2}}]}, [("h", '{"b": 2}')]),
        (
            {"candidates": [{"content": {"parts": [{"functionCall": {"name": "i", "args": {"c": 3}}}]}}]},
            [("i", '{"c": 3}')],
        ),
        (
            SDKObject(content="", tool_calls=[{"name": "j", "args": {"d": 4}}]),
            [("j", '{"d": 4}')],
        ),  # LangChain
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"function": {"name": "k", "arguments": "[]"}}],
            },
            [("k", "[]")],
        ),
        (  # Pydantic AI ModelResponse
            SDKObject(
                parts=[
                    SDKObject(part_kind="text", content="hi"),
                    SDKObject(part_kind="tool-call", tool_name="n", args='{"f": 6}'),
                ]
            ),
            [("n", '{"f": 6}')],
        ),
        (  # LlamaIndex ChatResponse whose message holds a ToolCallBlock
            SDKObject(
                message=SDKObject(content=None, blocks=[SDKObject(tool_name="m", tool_kwargs={"e": 5})])
            ),
            [("m", '{"e": 5}')],
        ),
    ],
)
def test_tool_calls_are_read_from_every_shape(raw: Any, calls: list[tuple[str, str]]) -> None:
    assert [(c.name, c.arguments) for c in ModelOutput(raw).tool_calls] == calls


def test_no_repr_fallback_and_escaped_secrets_are_found() -> None:
    assert ModelOutput(Opaque()).text == "" and Forbidden("sk-")(ModelOutput(Opaque())).passed
    escaped = {
        "choices": [
            {"message": {"tool_calls": [{"function": {"name": "f", "arguments": '{"k": "\\u0073k-X"}'}}]}}
        ]
    }
    assert not Forbidden(r"sk-\w")(ModelOutput(escaped)).passed
    two = {"choices": [{"message": {"content": "fine"}}, {"message": {"content": "x" * 20}}]}
    assert ModelOutput(two).texts == ("fine", "x" * 20)
    assert MaxLength(10)(ModelOutput(two)).message == "choice 1: 20 characters, more than 10"
    assert JsonOutput()(
        ModelOutput({"choices": [{"message": {"content": "[1]"}}, {"message": {"content": "no"}}]})
    ).message.startswith("choice 1: not valid JSON")
