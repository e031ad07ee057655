"""RequireApproval through the kernel: a gated tool call runs only once approved, and fails closed."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from veronica_mw import (
    ApprovalQueue,
    ApprovalRequest,
    Approve,
    Edit,
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    PolicyPipeline,
    Reject,
    RequireApproval,
    ToolCallRejected,
    WrapOptions,
)

LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=20, max_retries_total=2)
TOKEN = "approvals-unit-token-9f3Kq7Zt2LmX"


class Outbox:
    """The sensitive tool: records every email it really sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def send_email(self, to: str, body: str = "") -> str:
        self.sent.append((to, body))
        return f"sent to {to}"

    async def asend_email(self, to: str, body: str = "") -> str:
        return self.send_email(to, body)


def context(approver: Any, **options: Any) -> ExecutionContext:
    return ExecutionContext(LIMITS, PolicyPipeline([RequireApproval(["send_*"], approver, **options)]))


def tool(name: str = "send_email") -> WrapOptions:
    return WrapOptions(operation_name=name)


def test_approved_call_runs_once_with_the_request_the_approver_saw() -> None:
    seen: list[ApprovalRequest] = []
    outbox = Outbox()

    def approver(request: ApprovalRequest) -> Approve:
        seen.append(request)
        return Approve()

    ctx = context(approver)
    ctx.call_llm(lambda: "plan", options=WrapOptions(cost_estimate_hint=0.01))
    assert (
        ctx.call_tool(outbox.send_email, "ann@example.com", body="hi", options=tool())
        == "sent to ann@example.com"
    )
    assert outbox.sent == [("ann@example.com", "hi")]
    (request,) = seen
    assert (request.tool, request.chain_id) == ("send_email", ctx.chain_id)
    assert request.arguments == {"to": "ann@example.com", "body": "hi"}
    assert request.usage["steps_used"] == 2 and request.usage["limits"]["max_steps"] == 20
    kinds = [e.kind for e in ctx.get_events()]
    assert kinds == ["approval_requested", "approval_granted"]
    assert [n.status for n in ctx.graph.nodes()] == ["ok", "ok"]


def test_names_and_glob_patterns() -> None:
    gate = RequireApproval(["send_*", "delete_user"], lambda r: True)
    assert gate.gates("send_email") and gate.gates("send_fax") and gate.gates("delete_user")
    assert gate.gates("crewai.tool:send_email")  # an adapter's prefix is ignored
    assert not gate.gates("lookup") and not gate.gates("delete_users") and not gate.gates("resend")


def test_ungated_tools_and_model_calls_never_ask() -> None:
    asked: list[str] = []

    def approver(request: ApprovalRequest) -> bool:
        asked.append(request.tool)
        return True

    ctx = context(approver)
    assert ctx.call_tool(lambda: "ok", options=tool("lookup")) == "ok"
    ctx.call_llm(lambda: "x", options=WrapOptions(operation_name="send_email"))  # a model call, not a tool
    assert asked == []


def test_reject_halts_with_policy_denied_and_403() -> None:
    outbox = Outbox()
    ctx = context(lambda r: Reject("not to the CEO"))
    with pytest.raises(ExecutionHalted) as info:
        ctx.call_tool(outbox.send_email, "ceo@example.com", options=tool())
    assert info.value.reason == "policy_denied" and "not to the CEO" in info.value.detail
    assert outbox.sent == []
    snap = ctx.get_snapshot()
    assert snap.http_status == 403 and snap.step_count == 1  # the decision stays a step of the graph
    assert [n.status for n in ctx.graph.nodes()] == ["rejected"]
    with pytest.raises(ExecutionHalted):
        ctx.call_llm(lambda: "x")


def test_reject_with_message_lets_the_run_go_on() -> None:
    outbox = Outbox()
    ctx = context(lambda r: False, on_reject="message")
    with pytest.raises(ToolCallRejected) as info:
        ctx.call_tool(outbox.send_email, "x@example.com", options=tool())
    assert (info.value.tool, info.value.message) == ("send_email", "rejected by the approver")
    assert not isinstance(info.value, RuntimeError)
    assert outbox.sent == [] and not ctx.aborted
    assert ctx.call_llm(lambda: "carry on") == "carry on"


def test_edit_runs_the_tool_with_the_new_arguments() -> None:
    outbox = Outbox()
    ctx = context(lambda r: Edit({**r.arguments, "to": "team@example.com"}))
    assert (
        ctx.call_tool(outbox.send_email, "ceo@example.com", body="hi", options=tool())
        == "sent to team@example.com"
    )
    assert outbox.sent == [("team@example.com", "hi")]
    assert [e.kind for e in ctx.get_events()] == ["approval_requested", "approval_edited"]


def test_edits_that_cannot_be_applied_are_rejections() -> None:
    outbox = Outbox()
    ctx = context(lambda r: Edit({"recipient": "x"}), on_reject="message")
    with pytest.raises(ToolCallRejected, match="do not fit the tool"):
        ctx.call_tool(outbox.send_email, "a@example.com", options=tool())
    # wrap_tool_call takes a closure: there are no arguments to edit
    ctx = context(lambda r: Edit({"to": "x"}))
    assert ctx.wrap_tool_call(lambda: outbox.send_email("a@example.com"), tool()).value == "halt"
    assert "cannot pass edited arguments" in ctx.get_snapshot().abort_detail
    assert outbox.sent == []


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ("yes", "malformed approval answer 'yes'"),
        (None, "malformed approval answer None"),
        (Reject(), "rejected by the approver"),
    ],
)
def test_malformed_answers_fail_closed(answer: Any, message: str) -> None:
    outbox = Outbox()
    ctx = context(lambda r: answer)
    with pytest.raises(ExecutionHalted):
        ctx.call_tool(outbox.send_email, "a@example.com", options=tool())
    assert message in ctx.get_snapshot().abort_detail and outbox.sent == []


def test_a_failing_approver_fails_closed() -> None:
    def broken(request: ApprovalRequest) -> Approve:
        raise ConnectionError("approval service down")

    ctx = context(broken)
    with pytest.raises(ExecutionHalted):
        ctx.call_tool(Outbox().send_email, "a@example.com", options=tool())
    assert "approver failed: ConnectionError: approval service down" in ctx.get_snapshot().abort_detail


def test_timeouts_are_rejections_sync_and_async() -> None:
    release = threading.Event()

    def stuck(request: ApprovalRequest) -> Approve:
        release.wait(30)
        return Approve()

    async def slow(request: ApprovalRequest) -> Approve:
        await asyncio.sleep(30)
        return Approve()

    outbox = Outbox()
    try:
        for approver in (stuck, slow):
            ctx = context(approver, timeout_s=0.2)
            with pytest.raises(ExecutionHalted):
                ctx.call_tool(outbox.send_email, "a@example.com", options=tool())
            assert "no decision within 0.2s" in ctx.get_snapshot().abort_detail
            actx = context(approver, timeout_s=0.2)
            with pytest.raises(ExecutionHalted):
                asyncio.run(actx.acall_tool(outbox.asend_email, "a@example.com", options=tool()))
            assert "no decision within 0.2s" in actx.get_snapshot().abort_detail
    finally:
        release.set()
    assert outbox.sent == []


def test_an_async_wait_leaves_the_event_loop_free() -> None:
    """The decision comes from another task on the same loop: a blocked loop could never deliver it."""
    outbox = Outbox()

    async def main() -> str:
        asked: asyncio.Queue[ApprovalRequest] = asyncio.Queue()
        decided: dict[str, asyncio.Future[Any]] = {}

        async def approver(request: ApprovalRequest) -> Any:
            decided[request.id] = asyncio.get_running_loop().create_future()
            await asked.put(request)
            return await decided[request.id]

        async def reviewer() -> None:
            request = await asked.get()
            decided[request.id].set_result(Approve())

        ctx = context(approver, timeout_s=30)
        result, _ = await asyncio.gather(
            ctx.acall_tool(outbox.asend_email, "a@example.com", options=tool()), reviewer()
        )
        return str(result)

    assert asyncio.run(main()) == "sent to a@example.com" and outbox.sent == [("a@example.com", "")]


def test_sync_tool_calls_wait_on_the_queue_and_a_decision_releases_them() -> None:
    queue = ApprovalQueue(TOKEN)
    outbox = Outbox()
    ctx = context(queue, timeout_s=30)
    results: list[Any] = []

    def agent() -> None:
        try:
            results.append(ctx.call_tool(outbox.send_email, "a@example.com", options=tool()))
        except BaseException as exc:
            results.append(exc)

    worker = threading.Thread(target=agent)
    worker.start()
    pending = _poll(lambda: asyncio.run(queue.pending()))
    assert outbox.sent == []  # it waits
    assert asyncio.run(queue.decide(pending[0]["id"], Approve())) == "ok"
    worker.join(30)
    assert results == ["sent to a@example.com"] and outbox.sent == [("a@example.com", "")]
    assert asyncio.run(queue.decide(pending[0]["id"], Approve())) == "decided"
    assert asyncio.run(queue.decide("nope", Approve())) == "unknown"


def test_a_halt_while_waiting_keeps_the_tool_from_running() -> None:
    outbox = Outbox()
    holder: list[ExecutionContext] = []

    def approver(request: ApprovalRequest) -> Approve:
        holder[0].cancel("user went away")  # the run ends while a person looks at the call
        return Approve()

    ctx = context(approver)
    holder.append(ctx)
    with pytest.raises(ExecutionHalted) as info:
        ctx.call_tool(outbox.send_email, "a@example.com", options=tool())
    assert info.value.reason == "cancelled" and outbox.sent == []


def test_two_phase_hooks_ask_once_per_keyed_call() -> None:
    asked: list[Any] = []

    def approver(request: ApprovalRequest) -> bool:
        asked.append(request.arguments)
        return True

    ctx = context(approver)
    node = ctx.begin_call("tool", tool(), key="run-1", arguments={"to": "a"})
    again = ctx.begin_call("tool", tool(), key="run-1", arguments={"to": "a"})
    assert again is node and asked == [{"to": "a"}]
    node.commit("done")


@pytest.mark.anyio
async def test_abegin_call_waits_without_a_thread() -> None:
    ctx = context(_async_approve, timeout_s=5)
    node = await ctx.abegin_call("tool", tool(), arguments={"to": "a"}, editable=True)
    assert node.edited_arguments == {"to": "b"}
    node.commit("ok")


async def _async_approve(request: ApprovalRequest) -> Edit:
    await asyncio.sleep(0)
    return Edit({"to": "b"})


def test_configuration_errors() -> None:
    with pytest.raises(ValueError, match="tools"):
        RequireApproval([], lambda r: True)
    with pytest.raises(TypeError, match="approver"):
        RequireApproval("x", "not callable")  # type: ignore[arg-type]
    for bad in (0, -1, float("inf"), float("nan"), True):
        with pytest.raises(ValueError, match="timeout_s"):
            RequireApproval("x", lambda r: True, timeout_s=bad)
    with pytest.raises(ValueError, match="on_reject"):
        RequireApproval("x", lambda r: True, on_reject="ignore")
    with pytest.raises(ValueError, match="128 bits"):
        ApprovalQueue("short")


def _poll(read: Any, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s  # hang guard only
    while time.monotonic() < deadline:
        value = read()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("nothing arrived")
