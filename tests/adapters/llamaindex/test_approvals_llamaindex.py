"""Approvals in LlamaIndex agents: the tool call waits for the approver without blocking the
workflow's loop, runs with edited arguments, or answers the model with the rejection."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from llama_index.core.agent.workflow import FunctionAgent, ToolCallResult
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from veronica_mw import (
    ApprovalRequest,
    Approve,
    Edit,
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    PolicyPipeline,
    Reject,
    RequireApproval,
)
from veronica_mw.adapters.llamaindex import VeronicaLlamaIndexHandler

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore:The `__fields__` attribute is deprecated"),
    pytest.mark.filterwarnings("ignore:The `__fields_set__` attribute is deprecated"),
    pytest.mark.filterwarnings("ignore:Accessing the 'model_(computed_)?fields' attribute on the instance"),
]


def emailing_llm() -> MockFunctionCallingLLM:
    """Calls send_email once; afterwards answers with what the tool said."""

    def reply(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        results = [m for m in messages if m.role == MessageRole.TOOL]
        if results:
            return ChatMessage(role=MessageRole.ASSISTANT, content=f"final: {results[-1].content}")
        call = ToolCallBlock(tool_call_id="c1", tool_name="send_email", tool_kwargs={"to": "ceo@example.com"})
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])

    return MockFunctionCallingLLM(response_generator=reply)


async def run(approver: Any, on_reject: str = "halt") -> tuple[Any, list[str], list[ToolCallResult]]:
    sent: list[str] = []

    def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return f"sent to {to}"

    agent = FunctionAgent(tools=[FunctionTool.from_defaults(send_email)], llm=emailing_llm())
    pipeline = PolicyPipeline([RequireApproval("send_email", approver, timeout_s=10, on_reject=on_reject)])
    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=1, max_steps=10, max_retries_total=0), pipeline)
    results: list[ToolCallResult] = []
    with VeronicaLlamaIndexHandler(ctx), anyio.fail_after(20):
        handler = agent.run("email the CEO")
        async for event in handler.stream_events():
            if isinstance(event, ToolCallResult):
                results.append(event)
        return await handler, sent, results


async def test_approval_is_awaited_on_the_workflow_loop() -> None:
    asked: asyncio.Queue[ApprovalRequest] = asyncio.Queue()
    answers: dict[str, asyncio.Future[Any]] = {}

    async def approver(request: ApprovalRequest) -> Any:
        answers[request.id] = asyncio.get_running_loop().create_future()
        await asked.put(request)
        return await answers[request.id]

    async def reviewer() -> None:  # another task on the same loop: a blocked loop never gets here
        request = await asked.get()
        assert request.arguments == {"to": "ceo@example.com"}
        answers[request.id].set_result(Approve())

    (response, sent, _), _ = await asyncio.gather(run(approver), reviewer())
    assert sent == ["ceo@example.com"] and str(response) == "final: sent to ceo@example.com"


async def test_edited_arguments_are_used() -> None:
    response, sent, _ = await run(lambda r: Edit({"to": "office@example.com"}))
    assert sent == ["office@example.com"] and str(response) == "final: sent to office@example.com"


async def test_a_rejection_with_message_is_the_tools_answer() -> None:
    response, sent, results = await run(lambda r: Reject("on leave"), on_reject="message")
    assert sent == []
    (result,) = results
    assert result.tool_output.is_error and result.tool_output.content == "Tool call rejected: on leave"
    assert str(response) == "final: Tool call rejected: on leave"


async def test_a_rejection_halts_the_run() -> None:
    with pytest.raises(ExecutionHalted) as info:
        await run(lambda r: False)
    assert info.value.reason == "policy_denied"
