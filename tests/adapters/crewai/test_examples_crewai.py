"""The README's runnable example for this framework runs offline and really halts."""

from __future__ import annotations

from collections.abc import Callable

import pytest


@pytest.mark.parametrize("script", ["crewai_crew.py"])
def test_example_runs_offline_and_halts(script: str, run_example: Callable[[str], str]) -> None:
    assert "halted: step_limit" in run_example(script)
