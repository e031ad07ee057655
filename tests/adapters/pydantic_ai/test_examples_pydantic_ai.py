"""The README's runnable example for Pydantic AI runs offline and really halts."""

from __future__ import annotations

from collections.abc import Callable


def test_example_runs_offline_and_halts(run_example: Callable[[str], str]) -> None:
    out = run_example("pydantic_ai_agent.py")
    assert "agent halted: step_limit (max_steps=6 reached)" in out
    assert "  steps: llm tool llm tool llm tool" in out
    assert out.count("tool ran: weather('Oslo')") == 4  # 3 in the first run, 1 instrumented
    assert "agent halted: retry_limit" in out
    assert "  3 model requests, $0.0270, 2 retries" in out  # 3 x gpt-4o (2,000 in, 400 out)
    assert "agent halted: step_limit after 3 steps" in out
