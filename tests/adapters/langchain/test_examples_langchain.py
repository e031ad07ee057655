"""The README's runnable example for this framework runs offline and really halts."""

from __future__ import annotations

from collections.abc import Callable

import pytest


@pytest.mark.parametrize("script", ["langchain_chain.py", "langgraph_agent.py"])
def test_example_runs_offline_and_halts(script: str, run_example: Callable[[str], str]) -> None:
    assert "halted" in run_example(script)
