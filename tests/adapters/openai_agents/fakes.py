"""Offline doubles for the Agents SDK: a real ``Model`` subclass that keeps asking for a tool, and
a function tool, both counting what really ran."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from agents import Agent, FunctionTool, ModelResponse, Usage, function_tool
from agents.models.interface import Model
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputItem,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseUsage,
)
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails


@dataclass
class Counter:
    """What really ran: model calls (the fake's body) and tool bodies."""

    model_calls: int = 0
    tool_calls: int = 0
    tools_seen: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.model_calls + self.tool_calls


_call_ids = itertools.count(1)  # the SDK refuses a tool call id reused within a run


def tool_call(name: str, arguments: str = "{}") -> ResponseFunctionToolCall:
    n = next(_call_ids)
    return ResponseFunctionToolCall(
        type="function_call", call_id=f"call_{n}", name=name, arguments=arguments, id=f"fc_{n}"
    )


def message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg_1",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


class ToolLoopModel(Model):
    """Answers every request by asking for ``tool`` again: the agent never ends by itself.

    ``arguments``: the JSON arguments of each tool call. ``model`` names the model the way the
    SDK's own OpenAI models do (used for pricing). ``finish_after``: answer with a final message
    from that call on. ``handoff_to``: the first call asks for that handoff tool instead.
    ``parallel``: tool calls asked for at once. ``fail_on``: that call raises. ``gate``: each call
    waits for it first.
    """

    def __init__(
        self,
        counter: Counter,
        *,
        tool: str = "ping",
        arguments: str = "{}",
        model: str = "gpt-4o",
        usage: tuple[int, int, int] = (1000, 500, 200),
        finish_after: int | None = None,
        handoff_to: str | None = None,
        parallel: int = 1,
        fail_on: int | None = None,
        gate: asyncio.Event | None = None,
    ) -> None:
        self.counter = counter
        self.tool = tool
        self.arguments = arguments
        self.model = model
        self.usage = usage
        self.finish_after = finish_after
        self.handoff_to = handoff_to
        self.parallel = parallel
        self.fail_on = fail_on
        self.gate = gate
        self.calls = 0

    def _output(self) -> list[ResponseOutputItem]:
        self.calls += 1
        self.counter.model_calls += 1
        if self.fail_on == self.calls:
            raise ConnectionError("the fake model is down")
        if self.finish_after is not None and self.calls >= self.finish_after:
            return [message("done")]
        if self.handoff_to is not None and self.calls == 1:
            return [tool_call(self.handoff_to)]
        return [tool_call(self.tool, self.arguments) for _ in range(self.parallel)]

    def _usage(self) -> Usage:
        inp, out, cached = self.usage
        return Usage(
            requests=1,
            input_tokens=inp,
            output_tokens=out,
            total_tokens=inp + out,
            input_tokens_details=InputTokensDetails(cached_tokens=cached, cache_write_tokens=0),
            output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
        )

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        if self.gate is not None:
            await self.gate.wait()
        return ModelResponse(output=self._output(), usage=self._usage(), response_id=f"resp_{self.calls}")

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        if self.gate is not None:
            await self.gate.wait()
        output = self._output()
        inp, out, cached = self.usage
        response = Response(
            id=f"resp_{self.calls}",
            created_at=0,
            model=self.model,
            object="response",
            output=output,
            tool_choice="auto",
            tools=[],
            parallel_tool_calls=self.parallel > 1,
            usage=ResponseUsage(
                input_tokens=inp,
                output_tokens=out,
                total_tokens=inp + out,
                input_tokens_details=InputTokensDetails(cached_tokens=cached, cache_write_tokens=0),
                output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
            ),
        )
        yield ResponseCompletedEvent(type="response.completed", response=response, sequence_number=1)


def ping_tool(counter: Counter, name: str = "ping") -> FunctionTool:
    @function_tool(name_override=name)
    def ping() -> str:
        """Check that the service answers."""
        counter.tool_calls += 1
        counter.tools_seen.append(name)
        return "pong"

    return ping


def looping_agent(counter: Counter, name: str = "looper", **model_options: Any) -> Agent[Any]:
    """An agent whose model keeps asking for its ping tool."""
    return Agent(name=name, model=ToolLoopModel(counter, **model_options), tools=[ping_tool(counter)])
