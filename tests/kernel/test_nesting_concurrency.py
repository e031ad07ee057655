"""Nested contexts under real concurrency and random trees: no ancestor is ever pushed past a
limit, and the ledger of every context equals the work done in it and below it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veronica_mw import Decision, ExecutionConfig, ExecutionContext, ExecutionHalted, WrapOptions


class Flaky(Exception):
    pass


def _fail() -> None:
    raise Flaky()


def _constant(amount: float) -> Callable[[object], float]:
    return lambda _: amount


@pytest.mark.parametrize(
    ("actual", "binding"),
    [(0.0004, "step_limit"), (0.001, "budget_exceeded")],  # 1000 calls fit the cost, or 500 do
)
def test_eight_threads_each_with_a_child_of_one_parent(actual: float, binding: str) -> None:
    parent = ExecutionContext(
        ExecutionConfig(max_cost_usd=0.5, max_steps=1000, max_retries_total=10_000), name="parent"
    )
    generous = ExecutionConfig(max_cost_usd=100.0, max_steps=100_000, max_retries_total=10_000)
    ran = [0] * 8
    failed = [0] * 8
    children: list[ExecutionContext] = []
    barrier = threading.Barrier(8)
    options = WrapOptions(cost_estimate_hint=0.001, cost_fn=lambda _: actual)

    def worker(i: int) -> None:
        with ExecutionContext(generous, parent=parent, name=f"child-{i}") as child:
            children.append(child)
            barrier.wait()
            for n in range(10_000):
                if n % 97 == 0:
                    try:
                        child.call_tool(_fail)
                    except Flaky:
                        failed[i] += 1
                    except ExecutionHalted:
                        pass
                    continue

                def body(i: int = i) -> None:
                    ran[i] += 1

                child.wrap_llm_call(body, options)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    snap = parent.get_snapshot()
    assert snap.step_count <= 1000
    assert snap.cost_usd_accumulated <= 0.5 + 1e-9
    assert snap.abort_reason == binding
    assert snap.in_flight == 0 and snap.cost_usd_reserved == pytest.approx(0.0, abs=1e-9)
    # The ledger of every context equals the work done in it, and the parent's is their sum.
    assert snap.step_count == sum(ran) + sum(failed)
    assert snap.retries_used == sum(failed)
    assert snap.cost_usd_accumulated == pytest.approx(sum(ran) * actual)
    by_name = {c.name: c.get_snapshot() for c in children}
    for i in range(8):
        child = by_name[f"child-{i}"]
        assert child.step_count == ran[i] + failed[i]
        assert child.retries_used == failed[i]
        assert child.cost_usd_accumulated == pytest.approx(ran[i] * actual)
        assert child.aborted and child.in_flight == 0
    assert len(snap.children) == 8


def test_threads_in_a_three_level_tree_never_overshoot_the_root() -> None:
    root = ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=300, max_retries_total=0))
    mids = [root.child(f"mid-{i}", max_steps=200) for i in range(2)]
    leaves = [mid.child(f"leaf-{j}") for mid in mids for j in range(2)]
    ran = [0] * len(leaves)
    barrier = threading.Barrier(len(leaves))

    def worker(i: int) -> None:
        barrier.wait()
        for _ in range(2_000):
            if leaves[i].wrap_tool_call(lambda: None) is Decision.HALT:
                return
            ran[i] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(leaves))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert root.get_snapshot().step_count == sum(ran) == 300
    for m, mid in enumerate(mids):
        assert mid.get_snapshot().step_count == ran[2 * m] + ran[2 * m + 1] <= 200


# -- hypothesis: random trees and random calls -------------------------------------------------------


@dataclass
class Tally:
    steps: int = 0
    cost: float = 0.0
    retries: int = 0
    children: list[int] = field(default_factory=list)


limits = st.tuples(st.floats(0, 2, allow_nan=False), st.integers(0, 20), st.integers(0, 4))
# Each new context's parent is one of the contexts made before it (index 0 is the root).
trees = st.lists(st.tuples(st.integers(0, 100), limits), min_size=0, max_size=6)
actions = st.lists(
    st.tuples(
        st.integers(0, 100),
        st.sampled_from(["llm", "tool", "fail", "cancel"]),
        st.floats(0, 0.6, allow_nan=False),
        st.floats(0, 1, allow_nan=False),
    ),
    max_size=50,
)


@settings(max_examples=200, deadline=None)
@given(root=limits, tree=trees, plan=actions)
def test_random_trees_respect_every_limit_at_every_level(
    root: tuple[float, int, int],
    tree: list[tuple[int, tuple[float, int, int]]],
    plan: list[tuple[int, str, float, float]],
) -> None:
    def config(limit: tuple[float, int, int]) -> ExecutionConfig:
        return ExecutionConfig(max_cost_usd=limit[0], max_steps=limit[1], max_retries_total=limit[2])

    contexts = [ExecutionContext(config(root))]
    parents = [0]  # the root's entry is never read
    for parent, shape in tree:
        p = parent % len(contexts)
        contexts.append(ExecutionContext(config(shape), parent=contexts[p]))
        parents.append(p)
    for target, kind, hint, share in plan:
        i = target % len(contexts)
        ctx = contexts[i]
        options = WrapOptions(cost_estimate_hint=hint, cost_fn=_constant(hint * share))
        if kind == "cancel":
            ctx.cancel("property")
            continue
        if kind == "fail":
            try:
                ctx.call_tool(_fail)
            except (Flaky, ExecutionHalted):
                pass
            continue
        (ctx.wrap_llm_call if kind == "llm" else ctx.wrap_tool_call)(lambda: None, options)
    # What really ran, from each context's own graph, summed up the tree.
    totals = [Tally() for _ in contexts]
    for i, ctx in enumerate(contexts):
        for node in ctx.graph.nodes():
            if node.status in ("ok", "error"):
                totals[i].steps += 1
                totals[i].cost += node.cost_usd
            totals[i].retries += node.status == "error"  # a failure draws at most one retry
    for i in range(len(contexts) - 1, 0, -1):
        p = parents[i]
        totals[p].steps += totals[i].steps
        totals[p].cost += totals[i].cost
        totals[p].children.append(i)
    for i, ctx in enumerate(contexts):
        snap = ctx.get_snapshot()
        limit = ctx.config
        assert snap.step_count <= limit.max_steps
        assert snap.cost_usd_accumulated <= limit.max_cost_usd + 1e-9  # actual <= hint here
        assert snap.retries_used <= limit.max_retries_total
        assert snap.in_flight == 0 and snap.cost_usd_reserved == pytest.approx(0.0, abs=1e-9)
        assert snap.step_count == totals[i].steps
        assert snap.cost_usd_accumulated == pytest.approx(totals[i].cost, abs=1e-9)
        # A retry drawn below is drawn here too; the rest were drawn by this context's own failures.
        below = sum(contexts[c].get_snapshot().retries_used for c in totals[i].children)
        own_draws = snap.retries_used - below
        assert 0 <= own_draws <= totals[i].retries
