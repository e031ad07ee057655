"""Sub-agent budgets (``ctx.child``), snapshot names and children, and the text cost tree."""

from __future__ import annotations

import json
import time

import pytest

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, WrapOptions

COORDINATOR = ExecutionConfig(
    max_cost_usd=1.0, max_steps=10, max_retries_total=2, timeout_ms=60_000, warn_at=(0.8,)
)


def test_child_limits_default_to_what_the_parent_has_left() -> None:
    with ExecutionContext(COORDINATOR, name="coordinator") as coordinator:
        coordinator.call_llm(lambda: "plan", options=WrapOptions(cost_fn=lambda _: 0.25))
        pending = coordinator.begin_call("llm", WrapOptions(cost_estimate_hint=0.25))
        sub = coordinator.child("researcher")
        pending.commit(cost_usd=0.25)
    limits = sub.config
    assert limits.max_cost_usd == pytest.approx(0.5)  # committed and reserved are both taken
    assert (limits.max_steps, limits.max_retries_total) == (8, 2)
    assert 0 < limits.timeout_ms <= 60_000 and limits.warn_at == (0.8,)
    assert sub.parent is coordinator and sub.name == "researcher"
    shared = coordinator.child("writer", max_cost_usd=0.1, max_steps=3, max_retries_total=0, timeout_ms=0)
    assert shared.config == ExecutionConfig(0.1, 3, 0, 0, warn_at=(0.8,))
    with pytest.raises(TypeError, match="name"):
        coordinator.child(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_steps"):
        coordinator.child("bad", max_steps=-1)


def test_a_child_of_a_context_without_deadline_has_none() -> None:
    parent = ExecutionContext(ExecutionConfig(1.0, 5, 0))
    assert parent.child("c").config.timeout_ms == 0


def test_shares_given_to_sub_agents_never_add_up_past_the_coordinator() -> None:
    coordinator = ExecutionContext(ExecutionConfig(1.0, 6, 0), name="coordinator")
    agents = [coordinator.child(f"agent-{i}", max_steps=4) for i in range(3)]  # 12 > 6
    ran = 0
    for agent in agents:
        try:
            for _ in range(4):
                agent.call_tool(lambda: None)
                ran += 1
        except ExecutionHalted:
            pass
    assert ran == 6 == coordinator.get_snapshot().step_count
    assert [a.get_snapshot().step_count for a in agents] == [4, 2, 0]


def test_snapshot_carries_name_and_children_with_their_own_usage() -> None:
    root = ExecutionContext(ExecutionConfig(1.0, 10, 0), name="root")
    left = root.child("left")
    right = root.child("right")
    leaf = left.child("leaf")
    leaf.call_llm(lambda: "x", options=WrapOptions(cost_fn=lambda _: 0.2))
    right.call_tool(lambda: None)
    data = root.get_snapshot().as_dict()
    assert json.loads(json.dumps(data)) == data
    assert (data["name"], data["steps_used"], data["cost_usd_used"]) == ("root", 2, 0.2)
    assert [c["name"] for c in data["children"]] == ["left", "right"]
    left_data, right_data = data["children"]
    assert (left_data["steps_used"], left_data["children"][0]["name"]) == (1, "leaf")
    assert (right_data["steps_used"], right_data["cost_usd_used"], right_data["children"]) == (1, 0.0, [])


def test_tree_shows_name_steps_cost_against_limit_and_status() -> None:
    coordinator = ExecutionContext(ExecutionConfig(1.0, 4, 0), name="coordinator")
    planner = coordinator.child("planner", max_cost_usd=0.5, max_steps=3)
    critic = coordinator.child("critic", max_cost_usd=0.5, max_steps=3)
    for agent in (planner, critic, planner, critic, planner):
        try:
            agent.call_llm(lambda: "x", options=WrapOptions(cost_fn=lambda _: 0.01))
        except ExecutionHalted:
            pass
    detached = ExecutionContext(ExecutionConfig(1.0, 1, 0), parent=None)
    assert detached.tree() == f"context {detached.chain_id}  steps 0/1  cost $0.000000/$1  retries 0/0  ok"
    assert coordinator.tree().splitlines() == [
        "coordinator  steps 4/4  cost $0.040000/$1  retries 0/0  halted: step_limit",
        "├── planner  steps 2/3  cost $0.020000/$0.5  retries 0/0  halted: step_limit (ancestor)",
        "└── critic  steps 2/3  cost $0.020000/$0.5  retries 0/0  halted: step_limit (ancestor)",
    ]
    deeper = critic.child("tool")
    assert coordinator.tree(ascii=True).splitlines()[2:] == [
        "`-- critic  steps 2/3  cost $0.020000/$0.5  retries 0/0  halted: step_limit (ancestor)",
        "    `-- tool  steps 0/1  cost $0.000000/$0.48  retries 0/0  halted: step_limit (ancestor)",
    ]
    assert deeper.aborted  # created under a halted ancestor: halted from the start


def test_a_parent_keeps_its_most_recent_children_but_counts_them_all() -> None:
    parent = ExecutionContext(ExecutionConfig(1.0, 1000, 0))
    for i in range(300):
        parent.child(f"c{i}").call_tool(lambda: None)
    assert parent.get_snapshot().step_count == 300
    names = [c.name for c in parent.children]
    assert len(names) == 256 and names[0] == "c44" and names[-1] == "c299"


def test_elapsed_time_and_ids_of_children_are_their_own() -> None:
    parent = ExecutionContext(ExecutionConfig(1.0, 10, 0))
    time.sleep(0.002)
    child = parent.child("c")
    assert child.chain_id != parent.chain_id
    assert child.get_snapshot().elapsed_ms < parent.get_snapshot().elapsed_ms
