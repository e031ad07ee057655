"""The context's output checks (``ExecutionContext(checks=...)``) judge each model answer of a run;
responses that only call tools or hand off carry no answer and are not judged."""

from __future__ import annotations

import pytest

from veronica_mw import ExecutionContext, Forbidden, JsonOutput, OutputRejected
from veronica_mw.adapters.openai_agents import AgentsExecutionHalted, VeronicaRunHooks

from .fakes import Counter, looping_agent
from .test_hooks import MODES, drive, limits


@pytest.mark.parametrize("mode", MODES)
def test_a_halting_check_ends_the_run_with_verification_failed(mode: str) -> None:
    counter = Counter()
    ctx = ExecutionContext(limits(10), checks=[(Forbidden(r"\bdone\b"), "halt")])
    with pytest.raises(AgentsExecutionHalted) as info:
        drive(mode, looping_agent(counter, finish_after=3), hooks=VeronicaRunHooks(ctx))
    assert info.value.reason == "verification_failed"
    assert (counter.model_calls, counter.tool_calls) == (3, 2)  # the tool-call turns were not judged
    assert [n.status for n in ctx.graph.nodes()] == ["ok", "ok", "ok", "ok", "rejected"]


@pytest.mark.parametrize("mode", MODES)
def test_a_rejected_answer_ends_the_run_with_output_rejected(mode: str) -> None:
    counter = Counter()
    ctx = ExecutionContext(limits(10, retries=2), checks=[JsonOutput()])
    with pytest.raises(OutputRejected):
        drive(mode, looping_agent(counter, finish_after=2), hooks=VeronicaRunHooks(ctx))
    snap = ctx.get_snapshot()
    assert (snap.step_count, snap.retries_used, snap.aborted) == (3, 1, False)
    assert ctx.graph.nodes()[-1].cost_usd > 0  # it ran: its cost is committed
