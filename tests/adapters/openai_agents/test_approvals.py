"""Approval policies (``RequireApproval``) gate the agent's tool calls before they run: the
approver sees the call's arguments, is awaited without blocking the event loop, and a rejection
halts the run (``policy_denied``) or, with ``on_reject="message"``, ends it with ToolCallRejected."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import Runner

from veronica_mw import (
    ApprovalRequest,
    Approve,
    Edit,
    ExecutionContext,
    PolicyPipeline,
    Reject,
    RequireApproval,
    ToolCallRejected,
)
from veronica_mw.adapters.openai_agents import AgentsExecutionHalted, AgentsToolCallRejected, VeronicaRunHooks

from .fakes import Counter, looping_agent
from .test_hooks import MODES, drive, limits


def gated(approver: Any, on_reject: str = "halt") -> ExecutionContext:
    policy = RequireApproval("ping", approver, timeout_s=30, on_reject=on_reject)
    return ExecutionContext(limits(20), pipeline=PolicyPipeline([policy]))


@pytest.mark.parametrize("mode", MODES)
def test_approved_tool_calls_run_and_the_approver_saw_their_arguments(mode: str) -> None:
    seen: list[ApprovalRequest] = []

    def approver(request: ApprovalRequest) -> Approve:
        seen.append(request)
        return Approve()

    counter = Counter()
    ctx = gated(approver)
    agent = looping_agent(counter, finish_after=3, arguments="{}")
    assert drive(mode, agent, hooks=VeronicaRunHooks(ctx)) == "done"
    assert counter.tool_calls == 2
    assert [(r.tool, r.arguments) for r in seen] == [("openai_agents.tool:ping", {})] * 2


@pytest.mark.parametrize("mode", MODES)
def test_a_rejection_halts_the_run_before_the_tool_runs(mode: str) -> None:
    counter = Counter()
    ctx = gated(lambda request: Reject("not today"))
    with pytest.raises(AgentsExecutionHalted) as info:
        drive(mode, looping_agent(counter), hooks=VeronicaRunHooks(ctx))
    assert info.value.reason == "policy_denied" and ctx.get_snapshot().http_status == 403
    assert (counter.model_calls, counter.tool_calls) == (1, 0)


@pytest.mark.parametrize("mode", MODES)
def test_a_message_rejection_reaches_the_caller_unwrapped(mode: str) -> None:
    counter = Counter()
    ctx = gated(lambda request: Reject("ask a human"), on_reject="message")
    with pytest.raises(ToolCallRejected) as info:
        drive(mode, looping_agent(counter), hooks=VeronicaRunHooks(ctx))
    assert isinstance(info.value, AgentsToolCallRejected)
    assert info.value.message == "ask a human" and counter.tool_calls == 0


def test_an_async_approver_does_not_block_the_event_loop() -> None:
    ticks: list[int] = []
    waiting = asyncio.Event()

    async def approver(request: ApprovalRequest) -> Approve:
        waiting.set()
        while len(ticks) < 3:  # answers only once the loop has run something else meanwhile
            await asyncio.sleep(0.01)
        return Approve()

    async def ticker() -> None:
        await waiting.wait()
        for n in range(3):
            ticks.append(n)
            await asyncio.sleep(0)

    counter = Counter()
    ctx = gated(approver)

    async def main() -> None:
        run = Runner.run(looping_agent(counter, finish_after=2), "go", hooks=VeronicaRunHooks(ctx))
        await asyncio.wait_for(asyncio.gather(run, ticker()), timeout=60)  # hang guard only

    asyncio.run(main())
    assert ticks == [0, 1, 2] and counter.tool_calls == 1


def test_an_edit_is_a_rejection_since_hooks_cannot_change_the_arguments() -> None:
    counter = Counter()
    ctx = gated(lambda request: Edit({"host": "elsewhere"}))
    with pytest.raises(AgentsExecutionHalted) as info:
        drive("run", looping_agent(counter), hooks=VeronicaRunHooks(ctx))
    assert info.value.reason == "policy_denied" and "cannot pass edited arguments" in info.value.detail
    assert counter.tool_calls == 0
