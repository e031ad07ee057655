"""Stop a runaway LlamaIndex agent, offline (fake model): ``python examples/llamaindex_agent.py``.

The fake model asks for the same tool on every turn, so the ``FunctionAgent`` would loop until its
``max_iterations``. With ``VeronicaLlamaIndexHandler`` installed, every model call and every tool
call is one step, checked before it runs: at ``max_steps=6`` the run ends with ``ExecutionHalted``
raised out of ``await handler``. The second part prices a custom LLM's reported usage (gpt-4o,
$0.009 a call) and stops a plain ``chat`` loop before it would cross the $0.03 ceiling.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from llama_index.core.agent.workflow import FunctionAgent, ToolCall
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

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters.llamaindex import VeronicaLlamaIndexHandler


def always_the_weather_tool(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
    """The fake model's reply: call the weather tool again, whatever it was told."""
    call = ToolCallBlock(
        tool_call_id=f"call-{len(messages)}", tool_name="weather", tool_kwargs={"city": "Oslo"}
    )
    return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])


def weather(city: str) -> str:
    """Current weather in a city."""
    return f"rain in {city}"


class PricedLLM(CustomLLM):
    """A custom model that reports OpenAI-style usage in ``raw`` (no network)."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="gpt-4o")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        usage = {"prompt_tokens": 2_000, "completion_tokens": 400}
        return CompletionResponse(text="a long answer", raw={"model": "gpt-4o", "usage": usage})

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        yield self.complete(prompt, formatted, **kwargs)


async def runaway_agent() -> None:
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(weather)],
        llm=MockFunctionCallingLLM(response_generator=always_the_weather_tool),
    )
    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=6, max_retries_total=2))
    with VeronicaLlamaIndexHandler(ctx):
        handler = agent.run("What is the weather in Oslo?", max_iterations=100)
        async for event in handler.stream_events():
            if isinstance(event, ToolCall):
                print(f"  tool call: {event.tool_name}({event.tool_kwargs})")
        try:
            await handler
        except ExecutionHalted as halt:
            print(f"agent halted: {halt.reason} ({halt.detail})")
    print("  usage:", ctx.get_snapshot().as_dict())


def priced_chat_loop() -> None:
    llm = PricedLLM()
    limits = ExecutionConfig(max_cost_usd=0.03, max_steps=50, max_retries_total=2)
    # Reserving about one call's price before each call keeps the total under the ceiling; without a
    # hint the call that crosses it still runs (its cost is only known afterwards).
    handler = VeronicaLlamaIndexHandler(config=limits, cost_estimate_hint=0.009)
    with handler:
        try:
            while True:
                llm.chat([ChatMessage(role="user", content="Tell me more.")])
        except ExecutionHalted as halt:
            print(f"chat loop halted: {halt.reason} ({halt.detail})")
    ctx = handler.owned_context
    assert ctx is not None
    print("  usage:", ctx.get_snapshot().as_dict())


if __name__ == "__main__":
    print("1) FunctionAgent looping on a tool, max_steps=6")
    asyncio.run(runaway_agent())
    print("2) chat loop on a priced model, max_cost_usd=0.03")
    priced_chat_loop()
