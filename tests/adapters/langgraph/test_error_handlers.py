"""Error-handler nodes (LangGraph >= 1.2) cannot turn a halt into a recovery under veronica_graph."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.errors import NodeError
from langgraph.graph import START, StateGraph
from langgraph.types import Command
from typing_extensions import TypedDict

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters.langgraph import veronica_graph


def limits(**kwargs: Any) -> ExecutionConfig:
    base: dict[str, Any] = {"max_cost_usd": 100.0, "max_steps": 100, "max_retries_total": 0}
    return ExecutionConfig(**{**base, **kwargs})


class FlowState(TypedDict):
    n: int


@pytest.mark.parametrize("where", ["node", "default"])
def test_error_handlers_cannot_swallow_a_halt(where: str) -> None:
    recovered: list[str] = []
    runs: list[int] = []

    def work(state: FlowState) -> dict[str, int]:
        runs.append(state["n"])
        return {"n": state["n"] + 1}

    def recover(state: FlowState, error: NodeError) -> Command[Any]:
        recovered.append(type(error.error).__name__)
        return Command(update={"n": 100}, goto="work")

    builder = StateGraph(FlowState)
    if where == "node":
        builder.add_node("work", work, error_handler=recover)
    else:
        builder.set_node_defaults(error_handler=recover)
        builder.add_node("work", work)
    builder.add_edge(START, "work")
    builder.add_edge("work", "work")
    graph = veronica_graph(builder).compile()
    ctx = ExecutionContext(limits(max_steps=3))
    with ctx, pytest.raises(ExecutionHalted) as info:
        graph.invoke({"n": 0}, {"recursion_limit": 50})
    assert info.value.reason == "step_limit"
    assert runs == [0, 1, 2]
    assert recovered == []  # the wrapped handler re-raised the halt instead of recovering
