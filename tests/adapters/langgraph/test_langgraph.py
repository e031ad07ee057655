"""veronica_node / veronica_graph on real compiled LangGraph graphs."""

from __future__ import annotations

import asyncio
import inspect
import operator
import threading
from typing import Annotated, Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import RetryPolicy
from typing_extensions import TypedDict

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters.langgraph import veronica_graph, veronica_node


class LoopState(TypedDict):
    n: int


class FanState(TypedDict):
    seen: Annotated[list[str], operator.add]


class Flaky(Exception):
    """Retried by LangGraph's default RetryPolicy (a plain Exception subclass)."""


def limits(**kwargs: Any) -> ExecutionConfig:
    base: dict[str, Any] = {"max_cost_usd": 100.0, "max_steps": 100, "max_retries_total": 0}
    return ExecutionConfig(**{**base, **kwargs})


FAST_RETRY = RetryPolicy(initial_interval=0.001, jitter=False)
RETRY_ALL = RetryPolicy(initial_interval=0.001, jitter=False, retry_on=Exception)


def loop_graph(node: Any, retry: RetryPolicy | None) -> Any:
    builder = StateGraph(LoopState)
    builder.add_node("work", node, retry_policy=retry)
    builder.add_edge(START, "work")
    builder.add_edge("work", "work")  # forever
    return builder.compile()


@pytest.mark.parametrize(
    "retry", [None, FAST_RETRY, RETRY_ALL], ids=["no-retry", "default-retry", "retry-all"]
)
def test_loop_graph_runs_the_node_exactly_max_steps_times_sync(retry: RetryPolicy | None) -> None:
    runs: list[int] = []

    @veronica_node
    def work(state: LoopState) -> dict[str, int]:
        runs.append(state["n"])
        return {"n": state["n"] + 1}

    ctx = ExecutionContext(limits(max_steps=5))
    with ctx, pytest.raises(ExecutionHalted) as info:
        loop_graph(work, retry).invoke({"n": 0}, {"recursion_limit": 100})
    assert info.value.reason == "step_limit"
    assert runs == [0, 1, 2, 3, 4]
    assert ctx.get_snapshot().step_count == 5


@pytest.mark.parametrize(
    "retry", [None, FAST_RETRY, RETRY_ALL], ids=["no-retry", "default-retry", "retry-all"]
)
@pytest.mark.anyio
async def test_loop_graph_runs_the_node_exactly_max_steps_times_async(retry: RetryPolicy | None) -> None:
    runs: list[int] = []

    @veronica_node(context=None)
    async def work(state: LoopState) -> dict[str, int]:
        runs.append(state["n"])
        await asyncio.sleep(0)
        return {"n": state["n"] + 1}

    assert inspect.iscoroutinefunction(work)
    ctx = ExecutionContext(limits(max_steps=5))
    async with ctx:
        with pytest.raises(ExecutionHalted) as info:
            await loop_graph(work, retry).ainvoke({"n": 0}, {"recursion_limit": 100})
    assert info.value.reason == "step_limit"
    assert runs == [0, 1, 2, 3, 4]


def test_stream_raises_the_halt_unchanged() -> None:
    runs: list[int] = []

    def work(state: LoopState) -> dict[str, int]:
        runs.append(state["n"])
        return {"n": state["n"] + 1}

    updates: list[Any] = []
    graph = loop_graph(veronica_node(work, config=limits(max_steps=3)), FAST_RETRY)
    with pytest.raises(ExecutionHalted) as info:
        for update in graph.stream({"n": 0}, {"recursion_limit": 100}):
            updates.append(update)
    assert type(info.value) is ExecutionHalted and info.value.reason == "step_limit"
    assert runs == [0, 1, 2]
    assert updates == [{"work": {"n": 1}}, {"work": {"n": 2}}, {"work": {"n": 3}}]


def test_node_failures_draw_retries_from_the_chain_budget() -> None:
    runs: list[int] = []

    @veronica_node
    def work(state: LoopState) -> dict[str, int]:
        runs.append(state["n"])
        raise Flaky("try again")

    ctx = ExecutionContext(limits(max_retries_total=1))
    policy = RetryPolicy(initial_interval=0.001, jitter=False, max_attempts=10)
    with ctx, pytest.raises(ExecutionHalted) as info:
        loop_graph(work, policy).invoke({"n": 0})
    # Attempt 1 fails (retry 1 of 1), attempt 2 fails (budget spent: halt), attempt 3 is refused
    # and ExecutionHalted, a RuntimeError, is not retried by LangGraph.
    assert info.value.reason == "retry_limit"
    assert runs == [0, 0]
    assert ctx.get_snapshot().retries_used == 1


def fan_graph(kind_of_node: Any) -> Any:
    builder = StateGraph(FanState)
    for name in ("a", "b", "c"):
        builder.add_node(name, kind_of_node(name))
        builder.add_edge(START, name)
        builder.add_edge(name, "join")
    builder.add_node("join", kind_of_node("join"))
    builder.add_edge("join", END)
    return builder


def sync_node(runs: list[str]) -> Any:
    def make(name: str) -> Any:
        def node(state: FanState) -> dict[str, list[str]]:
            runs.append(f"{name}@{threading.current_thread().name}")
            return {"seen": [name]}

        node.__name__ = name
        return node

    return make


def test_parallel_branches_each_count_with_veronica_graph() -> None:
    runs: list[str] = []
    graph = veronica_graph(fan_graph(sync_node(runs))).compile()
    ctx = ExecutionContext(limits())
    with ctx:
        result = graph.invoke({"seen": []})
    assert sorted(result["seen"]) == ["a", "b", "c", "join"]
    assert len(runs) == 4
    assert ctx.get_snapshot().step_count == 4
    assert sorted(n.name for n in ctx.graph.nodes()) == ["a", "b", "c", "join"]


def test_parallel_branches_admit_exactly_max_steps() -> None:
    runs: list[str] = []
    graph = veronica_graph(fan_graph(sync_node(runs))).compile()
    ctx = ExecutionContext(limits(max_steps=2))
    with ctx, pytest.raises(ExecutionHalted):
        graph.invoke({"seen": []})
    assert len(runs) == 2
    assert ctx.get_snapshot().step_count == 2


@pytest.mark.anyio
async def test_async_parallel_branches_admit_exactly_max_steps() -> None:
    runs: list[str] = []

    def make(name: str) -> Any:
        async def node(state: FanState) -> dict[str, list[str]]:
            runs.append(name)
            await asyncio.sleep(0)
            return {"seen": [name]}

        return node

    graph = veronica_graph(fan_graph(make)).compile()
    ctx = ExecutionContext(limits(max_steps=2))
    async with ctx:
        with pytest.raises(ExecutionHalted):
            await graph.ainvoke({"seen": []})
    assert len(runs) == 2


def test_veronica_graph_owned_context_is_shared_by_all_nodes() -> None:
    runs: list[str] = []
    graph = veronica_graph(fan_graph(sync_node(runs)), config=limits(max_steps=10)).compile()
    graph.invoke({"seen": []})
    graph.invoke({"seen": []})
    # One owned context across both runs and all nodes: 8 steps, still under the limit.
    assert len(runs) == 8
    with pytest.raises(ExecutionHalted):
        graph.invoke({"seen": []})
    assert len(runs) == 10


def test_veronica_graph_does_not_double_wrap_and_keeps_kinds() -> None:
    runs: list[int] = []

    @veronica_node(kind="llm")
    def think(state: LoopState) -> dict[str, int]:
        runs.append(state["n"])
        return {"n": state["n"] + 1}

    def act(state: LoopState) -> dict[str, int]:
        return {"n": state["n"] + 1}

    builder = StateGraph(LoopState)
    builder.add_node("think", think)
    builder.add_node("act", act)
    builder.add_edge(START, "think")
    builder.add_edge("think", "act")
    builder.add_edge("act", END)
    graph = veronica_graph(builder, kinds={"act": "tool"}).compile()
    ctx = ExecutionContext(limits())
    with ctx:
        assert graph.invoke({"n": 0}) == {"n": 2}
    assert [(n.kind, n.name) for n in ctx.graph.nodes()] == [("llm", "think"), ("tool", "act")]


def test_node_signature_injection_is_preserved() -> None:
    seen: list[Any] = []

    @veronica_node
    def work(state: LoopState, config: RunnableConfig) -> dict[str, int]:
        seen.append(config["configurable"]["thread"])
        return {"n": state["n"] + 1}

    builder = StateGraph(LoopState)
    builder.add_node("work", work)
    builder.add_edge(START, "work")
    builder.add_edge("work", END)
    ctx = ExecutionContext(limits())
    with ctx:
        builder.compile().invoke({"n": 0}, {"configurable": {"thread": "t-1"}})
    assert seen == ["t-1"]
    assert ctx.get_snapshot().step_count == 1


def test_uncontained_without_a_context() -> None:
    runs: list[int] = []

    @veronica_node
    def work(state: LoopState) -> dict[str, int]:
        runs.append(state["n"])
        return {"n": state["n"] + 1}

    builder = StateGraph(LoopState)
    builder.add_node("work", work)
    builder.add_edge(START, "work")
    builder.add_edge("work", END)
    assert builder.compile().invoke({"n": 0}) == {"n": 1}
    assert runs == [0]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="kind"):
        veronica_node(kind="node")
    with pytest.raises(TypeError, match="StateGraph"):
        veronica_graph(object())  # type: ignore[arg-type]
    builder = StateGraph(LoopState)
    builder.add_node("work", lambda state: state)
    with pytest.raises(ValueError, match="unknown nodes"):
        veronica_graph(builder, kinds={"nope": "llm"})


@pytest.mark.anyio
async def test_astream_raises_the_halt_unchanged() -> None:
    runs: list[int] = []

    @veronica_node
    async def work(state: LoopState) -> dict[str, int]:
        runs.append(state["n"])
        return {"n": state["n"] + 1}

    ctx = ExecutionContext(limits(max_steps=2))
    updates: list[Any] = []
    async with ctx:
        with pytest.raises(ExecutionHalted) as info:
            async for update in loop_graph(work, FAST_RETRY).astream({"n": 0}, {"recursion_limit": 100}):
                updates.append(update)
    assert type(info.value) is ExecutionHalted and info.value.reason == "step_limit"
    assert runs == [0, 1]
    assert updates == [{"work": {"n": 1}}, {"work": {"n": 2}}]
