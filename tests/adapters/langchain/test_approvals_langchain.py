"""Approvals through LangChain: the agent middleware waits for the approver, runs edited calls and
answers rejections; the zero-config handler gates plain tool runs too."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, tool

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
from veronica_mw.adapters.langchain import VeronicaAgentMiddleware


class EmailingModel(BaseChatModel):
    """Asks for ``send_email`` once, then answers with what the tool said."""

    seen: list[list[BaseMessage]] = []

    @property
    def _llm_type(self) -> str:
        return "emailing-fake"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.seen.append(list(messages))
        results = [m for m in messages if isinstance(m, ToolMessage)]
        if results:
            message = AIMessage(content=f"final: {results[-1].content}")
        else:
            call = {"name": "send_email", "args": {"to": "ceo@example.com", "body": "hi"}, "id": "call_1"}
            message = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=message)])


def outbox() -> tuple[BaseTool, list[tuple[str, str]]]:
    sent: list[tuple[str, str]] = []

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        sent.append((to, body))
        return f"sent to {to}"

    return send_email, sent


def run(
    approver: Any, *, is_async: bool, on_reject: str = "halt"
) -> tuple[Any, list[tuple[str, str]], EmailingModel]:
    send_email, sent = outbox()
    model = EmailingModel(seen=[])
    pipeline = PolicyPipeline([RequireApproval("send_*", approver, timeout_s=10, on_reject=on_reject)])
    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=1, max_steps=10, max_retries_total=0), pipeline)
    agent = create_agent(model, tools=[send_email], middleware=[VeronicaAgentMiddleware(ctx)])
    start: Any = {"messages": [HumanMessage("email the CEO")]}
    state = asyncio.run(agent.ainvoke(start)) if is_async else agent.invoke(start)
    return state, sent, model


async def async_approve(request: ApprovalRequest) -> Approve:
    await asyncio.sleep(0)
    assert request.arguments == {"to": "ceo@example.com", "body": "hi"}
    return Approve()


@pytest.mark.parametrize("is_async", [False, True])
def test_approved_tool_calls_run(is_async: bool) -> None:
    state, sent, _ = run(async_approve, is_async=is_async)
    assert sent == [("ceo@example.com", "hi")]
    assert state["messages"][-1].content == "final: sent to ceo@example.com"


@pytest.mark.parametrize("is_async", [False, True])
def test_edited_tool_calls_run_with_the_new_arguments(is_async: bool) -> None:
    state, sent, _ = run(lambda r: Edit({**r.arguments, "to": "assistant@example.com"}), is_async=is_async)
    assert sent == [("assistant@example.com", "hi")]
    assert state["messages"][-1].content == "final: sent to assistant@example.com"


@pytest.mark.parametrize("is_async", [False, True])
def test_rejected_with_message_the_agent_hears_why(is_async: bool) -> None:
    state, sent, model = run(lambda r: Reject("the CEO is on leave"), is_async=is_async, on_reject="message")
    assert sent == []
    tool_message = model.seen[-1][-1]
    assert isinstance(tool_message, ToolMessage) and tool_message.status == "error"
    assert tool_message.content == "Tool call rejected: the CEO is on leave"
    assert state["messages"][-1].content == "final: Tool call rejected: the CEO is on leave"


@pytest.mark.parametrize("is_async", [False, True])
def test_rejected_with_halt_stops_the_agent(is_async: bool) -> None:
    with pytest.raises(ExecutionHalted) as info:
        run(lambda r: False, is_async=is_async)
    assert info.value.reason == "policy_denied" and info.value.snapshot is not None
    assert info.value.snapshot.http_status == 403


def test_plain_tool_runs_are_gated_through_the_zero_config_handler() -> None:
    send_email, sent = outbox()
    seen: list[Any] = []

    def approver(request: ApprovalRequest) -> bool:
        seen.append(request.arguments)
        return False

    pipeline = PolicyPipeline([RequireApproval("send_email", approver)])
    with ExecutionContext(ExecutionConfig(max_cost_usd=1, max_steps=10, max_retries_total=0), pipeline):
        with pytest.raises(ExecutionHalted) as info:
            send_email.invoke({"to": "a@example.com", "body": "x"})
    assert info.value.reason == "policy_denied" and sent == []
    assert seen == [{"to": "a@example.com", "body": "x"}]
