"""on_limit= on a LangGraph adapter's own context: a real compiled graph asks once, then halts at the cap."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

from veronica_mw import Approve, AskForMore, ExecutionConfig, ExecutionHalted
from veronica_mw.adapters.langgraph import veronica_node


class LoopState(TypedDict):
    n: int


def test_a_graph_at_its_step_limit_asks_and_runs_the_granted_steps() -> None:
    runs: list[int] = []
    asked: list[Any] = []

    def work(state: LoopState) -> dict[str, int]:
        runs.append(state["n"])
        return {"n": state["n"] + 1}

    def approver(request: Any) -> Approve:
        asked.append(request)
        return Approve()

    node = veronica_node(
        work,
        config=ExecutionConfig(max_cost_usd=1.0, max_steps=3, max_retries_total=0),
        on_limit=AskForMore(approver, add_steps=2, max_steps=5),
    )
    builder = StateGraph(LoopState)
    builder.add_node("work", node)
    builder.add_edge(START, "work")
    builder.add_edge("work", "work")  # forever: only the limits end it
    with pytest.raises(ExecutionHalted) as info:
        builder.compile().invoke({"n": 0}, {"recursion_limit": 100})
    assert runs == [0, 1, 2, 3, 4] and len(asked) == 1
    assert info.value.reason == "step_limit"
    assert "max_steps=5 reached: no more may be added" in info.value.detail
