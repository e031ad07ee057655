"""The paper's Section 6 kernel scenarios, asserting the exact number of underlying calls."""

from __future__ import annotations

from veronica_mw.cli._demo_kernel import recursive_tools, retry_amplification


def test_retry_amplification_three_layers_three_retries() -> None:
    baseline = retry_amplification(contained=False)
    contained = retry_amplification(contained=True)
    assert baseline["underlying_calls"] == 64  # (1 + 3) ** 3, Theorem 1
    assert contained["underlying_calls"] == 6  # 1 + max_retries_total(5)
    assert contained["halt_reason"] == "retry_limit"
    assert contained["retries_used"] == 5


def test_recursive_tools_twenty_calls_max_steps_five() -> None:
    baseline = recursive_tools(contained=False)
    contained = recursive_tools(contained=True)
    assert baseline["underlying_calls"] == 20
    assert contained["underlying_calls"] == 5
    assert contained["halt_reason"] == "step_limit"
