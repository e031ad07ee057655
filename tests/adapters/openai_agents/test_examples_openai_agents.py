"""The README's runnable example for the Agents SDK runs offline and really halts."""

from __future__ import annotations

from collections.abc import Callable


def test_example_runs_offline_and_halts(run_example: Callable[[str], str]) -> None:
    out = run_example("openai_agents_app.py")
    assert "step limit: halted: step_limit; model calls 3, tool runs 2, steps 5" in out
    assert "cost ceiling: halted: budget_exceeded; model calls 5, tool runs 4" in out
    assert "POST /research -> 429 step_limit" in out
