"""Offline models and tools built with LlamaIndex's own facilities; each counts its real invocations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
    ToolCallBlock,
)
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from pydantic import BaseModel

MODEL = "gpt-4o-mini"
USAGE = {"prompt_tokens": 1000, "completion_tokens": 500}


class UsageLLM(CustomLLM):
    """A custom LLM the way LlamaIndex documents them (``complete``/``stream_complete``; ``chat``
    and the async forms come from ``CustomLLM`` and call these, i.e. nested LLM events). Responses
    carry OpenAI-style ``raw["usage"]`` and the model name; ``calls`` counts real invocations."""

    calls: int = 0
    fail: bool = False
    shape: str = "openai-dict"  # how the provider reports usage, see _response()

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=MODEL)

    def _response(self, text: str, delta: str | None = None) -> CompletionResponse:
        tokens = USAGE["prompt_tokens"], USAGE["completion_tokens"]
        if self.shape == "openai-dict":  # raw = the provider's JSON: {"model": ..., "usage": {...}}
            return CompletionResponse(text=text, delta=delta, raw={"model": MODEL, "usage": dict(USAGE)})
        if self.shape == "anthropic-object":  # raw = an SDK object; no model name in it
            usage = ProviderUsage(input_tokens=tokens[0], output_tokens=tokens[1])
            return CompletionResponse(text=text, delta=delta, raw=ProviderMessage(usage=usage))
        # counts only in additional_kwargs, as some integrations report them
        extra = {"prompt_tokens": tokens[0], "completion_tokens": tokens[1]}
        return CompletionResponse(text=text, delta=delta, additional_kwargs=extra)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.calls += 1
        if self.fail:
            raise ValueError("model backend error")
        return self._response("ok")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        self.calls += 1
        last = self._response("ok", "k")

        def gen() -> CompletionResponseGen:
            yield CompletionResponse(text="o", delta="o")
            yield last

        return gen()


class ProviderUsage(BaseModel):
    input_tokens: int
    output_tokens: int


class ProviderMessage(BaseModel):
    """The shape of an SDK response object (e.g. an Anthropic ``Message``) kept in ``raw``."""

    usage: ProviderUsage


class Counter:
    """Invocation counts of one scenario's model and tool."""

    def __init__(self) -> None:
        self.llm = 0
        self.tool = 0


def looping_llm(counter: Counter, tool_name: str = "ping") -> MockFunctionCallingLLM:
    """LlamaIndex's MockFunctionCallingLLM whose every reply calls ``tool_name`` again."""

    def reply(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        counter.llm += 1
        call = ToolCallBlock(tool_call_id=f"call-{counter.llm}", tool_name=tool_name, tool_kwargs={})
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])

    return MockFunctionCallingLLM(response_generator=reply)


def ping_tool(counter: Counter) -> FunctionTool:
    def ping() -> str:
        """Check that the service answers."""
        counter.tool += 1
        return "pong"

    return FunctionTool.from_defaults(ping)
