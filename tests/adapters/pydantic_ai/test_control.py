"""Output checks and tool approvals (``veronica_mw.control``) through Pydantic AI.

A model answer an output check rejects is asked again the way pydantic-ai asks again (a
``ModelRetry`` with the check's feedback, the retry drawn once by the kernel); a tool call an
approval gate rejects never runs, and either the agent gets the rejection as the tool's result or
the run halts; an approver may edit the arguments the tool runs with.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from veronica_mw import (
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    HaltReason,
    PolicyPipeline,
)
from veronica_mw.adapters.pydantic_ai import VeronicaCapability
from veronica_mw.control import ApprovalRequest, Approve, Edit, MaxLength, Reject, RequireApproval

LIMITS = ExecutionConfig(max_cost_usd=10.0, max_steps=20, max_retries_total=3)


def test_a_rejected_answer_is_asked_again_with_the_checks_feedback() -> None:
    answers = ["a" * 80, "short"]
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=[TextPart(answers[len(seen) - 1])])

    agent = Agent(FunctionModel(model), capabilities=[VeronicaCapability()], retries=10)
    with ExecutionContext(LIMITS, checks=[MaxLength(20)]) as ctx:
        assert agent.run_sync("say something").output == "short"
    assert len(seen) == 2
    assert "max_length" in repr(seen[1][-1])  # the feedback reached the model with the re-ask
    assert [node.status for node in ctx.graph.nodes()] == ["rejected", "ok"]
    assert ctx.get_snapshot().retries_used == 1  # drawn once, by the kernel


def test_rejections_past_the_retry_budget_halt() -> None:
    calls: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(1)
        return ModelResponse(parts=[TextPart("x" * 100)])

    agent = Agent(FunctionModel(model), capabilities=[VeronicaCapability()], retries=10)
    config = ExecutionConfig(max_cost_usd=10.0, max_steps=20, max_retries_total=2)
    with ExecutionContext(config, checks=[MaxLength(20)]), pytest.raises(ExecutionHalted) as caught:
        agent.run_sync("say something")
    assert type(caught.value) is ExecutionHalted and caught.value.reason == HaltReason.RETRY_LIMIT
    assert len(calls) == 3


def approver(answer: Any, asked: list[Any]) -> Any:
    """An approver (as a person would answer through ``RequireApproval``) giving ``answer``."""

    async def decide(request: ApprovalRequest) -> Any:
        asked.append((request.tool, request.arguments))
        return answer

    return decide


def gate(answer: Any, asked: list[Any], on_reject: str = "halt") -> PolicyPipeline:
    # Tool steps are named "pydantic_ai.tool:<tool name>"; RequireApproval matches the bare name too.
    return PolicyPipeline([RequireApproval("transfer", approver(answer, asked), on_reject=on_reject)])


def transfer_agent() -> tuple[Agent[None, str], list[int], list[list[ModelMessage]]]:
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        if len(seen) == 1:
            return ModelResponse(parts=[ToolCallPart("transfer", {"amount": 900}, tool_call_id="t1")])
        return ModelResponse(parts=[TextPart("done")])

    ran: list[int] = []
    agent = Agent(FunctionModel(model), capabilities=[VeronicaCapability()])

    @agent.tool_plain
    def transfer(amount: int) -> str:
        ran.append(amount)
        return f"sent {amount}"

    return agent, ran, seen


def tool_returns(messages: list[ModelMessage]) -> list[Any]:
    return [
        part.content for m in messages for part in getattr(m, "parts", []) if isinstance(part, ToolReturnPart)
    ]


def test_a_rejected_tool_call_answers_the_agent_and_never_runs() -> None:
    asked: list[Any] = []
    agent, ran, seen = transfer_agent()
    pipeline = gate(Reject("transfers need a second signature"), asked, on_reject="message")
    with ExecutionContext(LIMITS, pipeline=pipeline) as ctx:
        assert agent.run_sync("pay the invoice").output == "done"
    assert ran == []
    assert asked == [("pydantic_ai.tool:transfer", {"amount": 900})]
    assert tool_returns(seen[1]) == ["transfers need a second signature"]
    assert [node.status for node in ctx.graph.nodes()] == ["ok", "rejected", "ok"]


def test_a_rejection_that_halts_stops_the_run() -> None:
    agent, ran, seen = transfer_agent()
    pipeline = gate(Reject("not allowed"), [])
    with ExecutionContext(LIMITS, pipeline=pipeline), pytest.raises(ExecutionHalted) as caught:
        agent.run_sync("pay the invoice")
    assert type(caught.value) is ExecutionHalted and caught.value.reason == HaltReason.POLICY_DENIED
    assert (ran, len(seen)) == ([], 1)


def test_an_approved_call_runs_and_an_approver_may_edit_the_arguments() -> None:
    for answer, expected in [(Approve(), 900), (Edit({"amount": 90}), 90)]:
        agent, ran, seen = transfer_agent()
        with ExecutionContext(LIMITS, pipeline=gate(answer, [])):
            assert agent.run_sync("pay the invoice").output == "done"
        assert ran == [expected]
        assert tool_returns(seen[1]) == [f"sent {expected}"]


def test_edited_arguments_that_are_no_arguments_are_a_rejection() -> None:
    agent, ran, seen = transfer_agent()
    with ExecutionContext(LIMITS, pipeline=gate(Edit(["90"]), [], on_reject="message")):
        agent.run_sync("pay the invoice")
    assert ran == []
    assert "do not fit the tool" in tool_returns(seen[1])[0]


def test_tool_call_turns_are_not_judged_by_output_checks() -> None:
    agent, ran, seen = transfer_agent()
    with ExecutionContext(LIMITS, checks=[MaxLength(10)]) as ctx:
        assert agent.run_sync("pay the invoice").output == "done"
    assert ran == [900]
    assert [node.status for node in ctx.graph.nodes()] == ["ok", "ok", "ok"]
    assert ctx.get_snapshot().retries_used == 0
