"""What an enclosing context decides about a call also holds for the calls of its children:
downgrade policies, tool approvals and output checks."""

from __future__ import annotations

from typing import Any

import pytest

from veronica_mw import (
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    OutputRejected,
    PolicyContext,
    PolicyDecision,
    PolicyPipeline,
    WrapOptions,
)
from veronica_mw.kernel._control import GateVerdict
from veronica_mw.kernel.graph import CallNode

LIMITS = ExecutionConfig(max_cost_usd=10.0, max_steps=20, max_retries_total=5)


class Downgrade:
    """Every model call of the context continues on a cheaper model."""

    policy_type = "downgrade"

    def check(self, context: PolicyContext) -> PolicyDecision:
        return PolicyDecision(allowed=True, policy_type="downgrade", fallback_model="gpt-4o-mini")

    def reset(self) -> None:
        pass


class Gate:
    """Approves nothing: the ``delete`` tool needs a person, and nobody says yes."""

    policy_type = "approval"

    def __init__(self) -> None:
        self.asked: list[str] = []

    def check(self, context: PolicyContext) -> PolicyDecision:
        return PolicyDecision(allowed=True, policy_type="approval")

    def reset(self) -> None:
        pass

    def gates(self, tool: str) -> bool:
        return tool == "delete"

    def decide(self, ctx: ExecutionContext, node: CallNode, arguments: Any) -> GateVerdict:
        self.asked.append(f"{ctx.name}:{node.name}")
        return GateVerdict(False, "not approved")

    async def adecide(self, ctx: ExecutionContext, node: CallNode, arguments: Any) -> GateVerdict:
        return self.decide(ctx, node, arguments)


def test_an_ancestors_downgrade_applies_to_the_childs_model_calls() -> None:
    parent = ExecutionContext(LIMITS, pipeline=PolicyPipeline([Downgrade()]), name="request")
    child = parent.child("agent")
    node = child.begin_call("llm", WrapOptions(model="gpt-4o", cost_estimate_hint=0.01))
    assert node.fallback_model == "gpt-4o-mini"
    node.downgraded("gpt-4o")
    node.commit(cost_usd=0.001)
    assert parent.get_snapshot().cost_usd_accumulated == pytest.approx(0.001)


def test_an_ancestors_approval_gate_asks_before_the_childs_tool_runs() -> None:
    gate = Gate()
    parent = ExecutionContext(LIMITS, pipeline=PolicyPipeline([gate]), name="request")
    child = parent.child("agent")
    child.call_tool(lambda: "listed", options=WrapOptions(operation_name="list"))
    ran = []
    with pytest.raises(ExecutionHalted) as halted:
        node = child.begin_call("tool", WrapOptions(operation_name="delete"), arguments={"id": 7})
        ran.append(node)
    assert ran == [] and gate.asked == ["agent:delete"]
    assert halted.value.reason == "policy_denied"


def test_the_enclosing_output_checks_verify_the_childs_answers() -> None:
    def no_secrets(output: Any) -> bool:
        return "sk-" not in output.text

    parent = ExecutionContext(LIMITS, checks=[no_secrets], name="request")
    child = parent.child("agent")
    assert child.call_llm(lambda: "a fine answer") == "a fine answer"
    with pytest.raises(OutputRejected):
        child.call_llm(lambda: "here is sk-123")
    assert parent.get_snapshot().retries_used == child.get_snapshot().retries_used == 1
    own = ExecutionContext(LIMITS, checks=[lambda output: True], parent=parent)
    assert own.call_llm(lambda: "sk-allowed here") == "sk-allowed here"  # its own checks rule it
