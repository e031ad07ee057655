"""One test per guarantee of the paper (G1–G6; G6 lives in test_config.py as well)."""

from __future__ import annotations

import threading
import time

import pytest

from veronica_mw import (
    BudgetEnforcer,
    CircuitBreaker,
    CircuitState,
    Decision,
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    PolicyContext,
    WrapOptions,
)


def config(
    cost: float = 1e9, steps: int = 10**9, retries: int = 10**9, timeout_ms: float = 0
) -> ExecutionConfig:
    return ExecutionConfig(
        max_cost_usd=cost, max_steps=steps, max_retries_total=retries, timeout_ms=timeout_ms
    )


def test_g1_cost_never_exceeds_ceiling_with_reserved_hints() -> None:
    ctx = ExecutionContext(config(cost=1.0))
    ran = 0

    def call() -> None:
        nonlocal ran
        ran += 1

    opts = WrapOptions(cost_estimate_hint=0.3, cost_fn=lambda _: 0.3)
    decisions = [ctx.wrap_llm_call(call, opts) for _ in range(5)]
    assert decisions == [Decision.ALLOW] * 3 + [Decision.HALT] * 2
    assert ran == 3
    snap = ctx.get_snapshot()
    assert snap.cost_usd_accumulated == pytest.approx(0.9)
    assert snap.abort_reason == "budget_exceeded"


def test_g1_zero_budget_allows_no_spend() -> None:
    ctx = ExecutionContext(config(cost=0.0))
    called = []
    assert ctx.wrap_llm_call(lambda: called.append(1)) is Decision.HALT
    assert called == []
    assert ctx.get_snapshot().abort_reason == "budget_exceeded"


def test_g1_underestimated_call_halts_at_first_call_after_crossing() -> None:
    ctx = ExecutionContext(config(cost=1.0))
    assert ctx.wrap_llm_call(lambda: None, WrapOptions(cost_fn=lambda _: 0.6)) is Decision.ALLOW
    # Actual cost (0.6 + 0.6) crosses the ceiling: the call already ran, the context halts now.
    assert ctx.wrap_llm_call(lambda: None, WrapOptions(cost_fn=lambda _: 0.6)) is Decision.HALT
    called = []
    assert ctx.wrap_llm_call(lambda: called.append(1)) is Decision.HALT
    assert called == []


def test_g1_concurrent_reservations_cannot_jointly_overshoot() -> None:
    ctx = ExecutionContext(config(cost=1.0))
    barrier = threading.Barrier(8)
    admitted = []

    def worker() -> None:
        barrier.wait()
        for _ in range(10):
            ctx.wrap_llm_call(lambda: admitted.append(1), WrapOptions(cost_estimate_hint=0.05))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(admitted) == 20  # 20 * 0.05 == 1.0 exactly; the 21st would cross
    assert ctx.get_snapshot().cost_usd_accumulated <= 1.0 + 1e-9


def test_g1_budget_enforcer_check_before_commit() -> None:
    budget = BudgetEnforcer(limit_usd=1.0)
    assert budget.spend(0.6)
    assert not budget.spend(0.5)
    assert budget.spent_usd == pytest.approx(0.6)
    assert budget.spend(0.4)
    for bad in (float("nan"), float("inf"), -0.1):
        with pytest.raises(ValueError):
            budget.spend(bad)
    assert budget.spent_usd == pytest.approx(1.0)


def test_g2_step_limit_admits_exactly_n_calls() -> None:
    ctx = ExecutionContext(config(steps=5))
    ran: list[int] = []
    for i in range(20):
        ctx.wrap_tool_call(lambda i=i: ran.append(i))  # type: ignore[misc]
    assert ran == [0, 1, 2, 3, 4]
    snap = ctx.get_snapshot()
    assert snap.step_count == 5
    assert snap.abort_reason == "step_limit"


def test_g2_zero_steps_allows_no_call() -> None:
    ctx = ExecutionContext(config(steps=0))
    with pytest.raises(ExecutionHalted) as info:
        ctx.call_llm(lambda: pytest.fail("must not run"))
    assert info.value.reason == "step_limit"


def test_g3_retry_budget_bounds_total_calls() -> None:
    ctx = ExecutionContext(config(retries=2))
    calls = 0

    def flaky() -> None:
        nonlocal calls
        calls += 1
        raise ConnectionError("upstream down")

    for _ in range(10):
        try:
            ctx.call_llm(flaky)
        except ConnectionError:
            continue
        except ExecutionHalted as halted:
            assert halted.reason == "retry_limit"
            break
    assert calls == 3  # 1 first attempt + 2 retries
    assert ctx.get_snapshot().retries_used == 2


def test_g3_zero_retries_allows_first_attempt_only() -> None:
    ctx = ExecutionContext(config(retries=0))
    assert ctx.call_llm(lambda: "ok") == "ok"
    assert ctx.call_llm(lambda: "ok") == "ok"  # successes are first attempts, not retries
    with pytest.raises(KeyError):
        ctx.call_llm(lambda: {"present": 1}["missing"])
    with pytest.raises(ExecutionHalted, match="retry_limit"):
        ctx.call_llm(lambda: "never")


def test_g4_open_breaker_denies_until_recovery_timeout() -> None:
    now = [0.0]
    breaker = CircuitBreaker(failure_threshold=2, recovery_timeout=10.0, clock=lambda: now[0])
    breaker.record_failure()
    assert _state(breaker) is CircuitState.CLOSED
    breaker.record_failure()
    assert _state(breaker) is CircuitState.OPEN
    for t in (0.0, 5.0, 9.999):
        now[0] = t
        assert not breaker.check(PolicyContext()).allowed
    now[0] = 10.0
    assert breaker.check(PolicyContext()).allowed  # the single probe
    assert not breaker.check(PolicyContext()).allowed
    breaker.record_success()
    assert _state(breaker) is CircuitState.CLOSED


def test_g4_breaker_in_context_halts_with_circuit_open() -> None:
    breaker = CircuitBreaker(failure_threshold=1, recovery_timeout=60.0)
    failing = ExecutionContext(config(), circuit_breaker=breaker)
    with pytest.raises(TimeoutError):
        failing.call_llm(_raise, TimeoutError("slow upstream"))
    other = ExecutionContext(config(), circuit_breaker=breaker)  # one breaker shared by two contexts
    with pytest.raises(ExecutionHalted) as info:
        other.call_llm(lambda: pytest.fail("must not run"))
    assert info.value.reason == "circuit_open"
    assert info.value.retry_after_s is not None and 0 < info.value.retry_after_s <= 60


def test_g5_timeout_halts_new_calls() -> None:
    with ExecutionContext(config(timeout_ms=50)) as ctx:
        assert ctx.wrap_llm_call(lambda: None) is Decision.ALLOW
        fired = threading.Event()
        ctx.cancellation_token.add_callback(fired.set)
        assert fired.wait(2.0), "the timeout pool never fired"
        assert ctx.aborted and ctx.abort_reason == "timeout"
        assert ctx.wrap_llm_call(lambda: pytest.fail("must not run")) is Decision.HALT


def test_g5_pool_fires_within_its_resolution() -> None:
    start = time.monotonic()
    with ExecutionContext(config(timeout_ms=100)) as ctx:
        fired = threading.Event()
        ctx.cancellation_token.add_callback(fired.set)
        assert fired.wait(2.0)
        late_ms = (time.monotonic() - start) * 1000 - 100
    # Hang guard, not a performance claim: the deadline fires once, near its time.
    assert -1 < late_ms < 1000


def _raise(exc: BaseException) -> None:
    raise exc


def _state(breaker: CircuitBreaker) -> CircuitState:
    return breaker.state
