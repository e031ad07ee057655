"""The README's runnable example for this framework runs offline and really halts."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest


@pytest.mark.parametrize("script", ["ag2_agents.py"])
def test_example_runs_offline_and_halts(script: str, run_example: Callable[[str], str]) -> None:
    assert "halted: step_limit" in run_example(script)


def test_demo_prints_the_multi_agent_tree_and_no_log_lines() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "veronica_mw.cli", "demo"], capture_output=True, text=True, check=True
    )
    assert "multi_agent_loop" in out.stdout and "unavailable" not in out.stdout
    tree = out.stdout.split("multi_agent_loop: contexts\n", 1)[1].splitlines()
    assert tree[0].startswith("coordinator  steps 8/8")
    assert tree[1].startswith("|-- planner  steps 4/5") and tree[2].startswith("`-- critic  steps 4/5")
    assert "veronica_mw:" not in out.stdout and "veronica_mw:" not in out.stderr
