"""Approvals in CrewAI: the before-tool hook waits for the approver; edits change the arguments the
tool runs with; a rejection either stops the crew or becomes the tool's answer to the agent."""

from __future__ import annotations

from typing import Any

import pytest
from crewai import Agent, Crew, Task
from crewai.tools import BaseTool

from veronica_mw import (
    ApprovalRequest,
    Edit,
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    PolicyPipeline,
    Reject,
    RequireApproval,
)
from veronica_mw.adapters.crewai import CrewExecutionHalted, VeronicaCrewAIHooks

from .fakes import MODEL, ToolLoopLLM

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai")


class RecordingLLM(ToolLoopLLM):
    """The looping fake, keeping the conversation it was given."""

    seen: list[Any] = []

    def call(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
        self.seen.append(str(messages))
        return super().call(messages, *args, **kwargs)


class RecordingLookup(BaseTool):
    name: str = "lookup"
    description: str = "Look a query up."
    queries: list[str] = []

    def _run(self, query: str) -> str:
        self.queries.append(query)
        return f"found {query}"


def kickoff(approver: Any, on_reject: str = "halt") -> tuple[ExecutionContext, RecordingLookup, RecordingLLM]:
    llm = RecordingLLM(model=MODEL, seen=[])
    tool = RecordingLookup(queries=[])
    agent = Agent(role="researcher", goal="facts", backstory="thorough", llm=llm, tools=[tool], max_iter=2)
    crew = Crew(agents=[agent], tasks=[Task(description="research", expected_output="facts", agent=agent)])
    pipeline = PolicyPipeline([RequireApproval("lookup", approver, timeout_s=10, on_reject=on_reject)])
    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=1, max_steps=50, max_retries_total=0), pipeline)
    with VeronicaCrewAIHooks(ctx):
        crew.kickoff()
    return ctx, tool, llm


def test_approved_calls_run_and_the_approver_sees_the_arguments() -> None:
    asked: list[ApprovalRequest] = []

    def approver(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    ctx, tool, _ = kickoff(approver)
    assert tool.queries == ["q1", "q2"]
    assert [r.arguments for r in asked] == [{"query": "q1"}, {"query": "q2"}]
    assert asked[0].tool == "crewai.tool:lookup"  # matched by the bare name


def test_edited_arguments_are_what_the_tool_gets() -> None:
    _, tool, _ = kickoff(lambda r: Edit({"query": r.arguments["query"] + "-reviewed"}))
    assert tool.queries == ["q1-reviewed", "q2-reviewed"]


def test_a_rejection_with_message_is_the_tools_answer() -> None:
    ctx, tool, llm = kickoff(lambda r: Reject("not this source"), on_reject="message")
    assert tool.queries == [] and not ctx.aborted
    assert "Tool call rejected: not this source" in llm.seen[1]


def test_a_rejection_stops_the_crew() -> None:
    with pytest.raises(ExecutionHalted) as info:
        kickoff(lambda r: False)
    assert isinstance(info.value, CrewExecutionHalted) and info.value.reason == "policy_denied"
