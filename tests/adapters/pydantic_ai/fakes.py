"""Offline agents built on Pydantic AI's own ``FunctionModel``; each counts what really ran."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from genai_prices import Usage, calc_price
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.usage import RequestUsage

MODEL = "gpt-4o"
INPUT_TOKENS, OUTPUT_TOKENS = 1_000, 200
PRICE = float(
    calc_price(Usage(input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS), model_ref=MODEL).total_price
)


def usage() -> RequestUsage:
    """The usage every fake response reports."""
    return RequestUsage(input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS)


class Runaway:
    """A model that asks for the ``weather`` tool on every turn, and that tool.

    ``model_calls``/``tool_calls`` count real executions of the model function and the tool body;
    ``seen`` keeps every message history the model was sent. Each response reports
    ``INPUT_TOKENS``/``OUTPUT_TOKENS`` under ``model_name`` (so it is priced like that model).
    ``tools_per_turn`` tool calls are asked for at once (parallel tool calls).
    """

    def __init__(self, *, model_name: str = MODEL, tools_per_turn: int = 1) -> None:
        self.model_calls = 0
        self.tool_calls = 0
        self.tools_per_turn = tools_per_turn
        self.seen: list[list[ModelMessage]] = []
        self.model = FunctionModel(self.respond, stream_function=self.stream, model_name=model_name)

    def _calls(self) -> list[ToolCallPart]:
        return [
            ToolCallPart("weather", {"city": "Oslo"}, tool_call_id=f"call-{self.model_calls}-{i}")
            for i in range(self.tools_per_turn)
        ]

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.model_calls += 1
        self.seen.append(list(messages))
        return ModelResponse(parts=list(self._calls()), usage=usage())

    async def stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[dict[int, DeltaToolCall]]:
        self.model_calls += 1
        self.seen.append(list(messages))
        for i, call in enumerate(self._calls()):
            yield {
                i: DeltaToolCall(
                    name=call.tool_name, json_args='{"city": "Oslo"}', tool_call_id=call.tool_call_id
                )
            }

    def weather(self, city: str) -> str:
        """Current weather in a city."""
        self.tool_calls += 1
        return f"rain in {city}"

    @property
    def executions(self) -> int:
        return self.model_calls + self.tool_calls

    def agent(self, capabilities: Sequence[Any] = (), **kwargs: Any) -> Agent[None, str]:
        agent = Agent(self.model, capabilities=list(capabilities), **kwargs)
        agent.tool_plain(self.weather)
        return agent


class Answering:
    """A model that answers ``text`` right away (priced like ``model_name``), counting its calls."""

    def __init__(self, text: str = "42", *, model_name: str = MODEL) -> None:
        self.text = text
        self.calls = 0
        self.model = FunctionModel(self.respond, stream_function=self.stream, model_name=model_name)

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        if info.output_tools:  # structured output: answer through the output tool
            call = ToolCallPart(info.output_tools[0].name, self.text, tool_call_id=f"out-{self.calls}")
            return ModelResponse(parts=[call], usage=usage())
        return ModelResponse(parts=[TextPart(self.text)], usage=usage())

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        self.calls += 1
        for word in self.text.split(" "):
            yield word + " "


FORMS = ["run_sync", "run", "run_stream", "iter", "run_stream_events"]


async def drive(agent: Agent[None, str], form: str) -> Any:
    """Run ``agent`` to its end in one of the ways Pydantic AI offers (the async ones)."""
    if form == "run":
        return (await agent.run("weather?")).output
    if form == "run_stream":
        async with agent.run_stream("weather?") as stream:
            async for _ in stream.stream_output():
                pass
            return await stream.get_output()
    if form == "iter":
        async with agent.iter("weather?") as run:
            async for _ in run:
                pass
            return run.result
    if form == "run_stream_events":
        async with agent.run_stream_events("weather?") as stream:
            return [event async for event in stream]
    raise AssertionError(form)


def run_form(agent: Agent[None, str], form: str) -> Any:
    if form == "run_sync":
        return agent.run_sync("weather?")
    return asyncio.run(drive(agent, form))
