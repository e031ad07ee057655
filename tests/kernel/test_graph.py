from __future__ import annotations

import gc
import tracemalloc

from veronica_mw import ExecutionConfig, ExecutionContext, WrapOptions


def test_graph_records_nodes_with_parents_and_aggregates() -> None:
    ctx = ExecutionContext(ExecutionConfig(10.0, 100, 10))

    def tool() -> str:
        ctx.call_llm(lambda: "inner", options=WrapOptions(operation_name="planner", cost_fn=lambda _: 0.01))
        return "tool done"

    ctx.call_tool(tool, options=WrapOptions(operation_name="search"))
    nodes = ctx.graph.nodes()
    assert [(n.kind, n.name, n.status) for n in nodes] == [("tool", "search", "ok"), ("llm", "planner", "ok")]
    assert nodes[1].parent_id == nodes[0].node_id and nodes[0].parent_id is None
    assert nodes[1].cost_usd == 0.01 and nodes[0].duration_ms >= nodes[1].duration_ms
    assert ctx.graph.aggregates()[("llm", "ok")].count == 1


def test_graph_memory_is_bounded() -> None:
    ctx = ExecutionContext(ExecutionConfig(1e9, 10**9, 0), graph_capacity=10_000, divergence_threshold=0)
    fn = lambda: None  # noqa: E731
    tracemalloc.start()
    try:
        for _ in range(20_000):  # warm-up: fill the ring buffer (traced, so refills net out)
            ctx.wrap_llm_call(fn)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(200_000):
            ctx.wrap_llm_call(fn)
        gc.collect()
        growth = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(ctx.graph.nodes()) == 10_000
    assert ctx.graph.total_nodes == 220_000
    assert growth < 256 * 1024, f"grew by {growth} bytes"
