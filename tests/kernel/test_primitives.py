from __future__ import annotations

import threading
import time

import pytest

from veronica_mw import (
    AgentStepGuard,
    BudgetEnforcer,
    CancellationToken,
    CircuitBreaker,
    CircuitState,
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    PolicyContext,
    PolicyPipeline,
    RetryContainer,
    RuntimePolicy,
    SharedTimeoutPool,
)


def test_step_guard_increments_before_check() -> None:
    guard = AgentStepGuard(max_steps=5)
    assert [guard.step(result=i) for i in range(5)] == [True, True, True, True, False]
    assert guard.last_result == 4
    with pytest.raises(ValueError):
        AgentStepGuard(-1)
    with pytest.raises(TypeError):
        AgentStepGuard(2.0)  # type: ignore[arg-type]


def test_pipeline_first_denial_wins_without_override() -> None:
    budget, guard, breaker = BudgetEnforcer(1.0), AgentStepGuard(3), CircuitBreaker(1, 10.0)
    for policy in (budget, guard, breaker, RetryContainer()):
        assert isinstance(policy, RuntimePolicy)
    pipeline = PolicyPipeline([budget, guard, breaker])
    assert pipeline.evaluate(PolicyContext(cost_usd=0.5, step_count=1)).allowed
    denied = pipeline.evaluate(PolicyContext(cost_usd=2.0, step_count=5))
    assert (denied.allowed, denied.policy_type) == (False, "budget")
    assert pipeline.evaluate(PolicyContext(cost_usd=0.1, step_count=3)).policy_type == "step_guard"
    with pytest.raises(TypeError):
        PolicyPipeline([object()])  # type: ignore[list-item]


def test_budget_enforcer_rejects_invalid_limit() -> None:
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError):
            BudgetEnforcer(bad)


def test_half_open_allows_exactly_one_probe_across_threads() -> None:
    now = [0.0]
    breaker = CircuitBreaker(failure_threshold=1, recovery_timeout=5.0, clock=lambda: now[0])
    breaker.record_failure()
    now[0] = 5.0
    barrier = threading.Barrier(16)
    allowed = []

    def probe() -> None:
        barrier.wait()
        if breaker.check(PolicyContext()).allowed:
            allowed.append(1)

    threads = [threading.Thread(target=probe) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert allowed == [1]
    assert _state(breaker) is CircuitState.HALF_OPEN
    breaker.record_failure()  # failed probe re-opens
    assert _state(breaker) is CircuitState.OPEN
    assert breaker.retry_after_s() == pytest.approx(5.0)


def test_breaker_validation() -> None:
    with pytest.raises(ValueError):
        CircuitBreaker(failure_threshold=0)
    with pytest.raises(ValueError):
        CircuitBreaker(recovery_timeout=float("nan"))


def test_retry_container_standalone_backoff_and_bound() -> None:
    delays: list[float] = []
    container = RetryContainer(
        max_retries=3, backoff_base=0.1, backoff_max=0.25, jitter=0.0, sleep=delays.append
    )
    calls = 0

    def always_fails() -> None:
        nonlocal calls
        calls += 1
        raise ConnectionError("nope")

    with pytest.raises(ConnectionError):
        container.execute(always_fails)
    assert calls == 4
    assert delays == [0.1, 0.2, 0.25]


def test_retry_container_jitter_stays_in_band() -> None:
    container = RetryContainer(backoff_base=1.0, backoff_max=100.0, jitter=0.25)
    for _ in range(200):
        assert 0.75 <= container.delay(0) <= 1.25


def test_retry_container_never_retries_a_halt() -> None:
    ctx = ExecutionContext(ExecutionConfig(1.0, 1, 10))
    calls = 0

    def model() -> str:
        nonlocal calls
        calls += 1
        return "x"

    container = RetryContainer(max_retries=5, backoff_base=0, sleep=lambda _: None)
    with ctx:
        assert container.execute(ctx.call_llm, model) == "x"
        with pytest.raises(ExecutionHalted):
            container.execute(ctx.call_llm, model)
    assert calls == 1


@pytest.mark.anyio
async def test_retry_container_async_draws_from_context() -> None:
    async def fails() -> None:
        raise OSError("x")

    container = RetryContainer(max_retries=10, backoff_base=0, jitter=0)
    async with ExecutionContext(ExecutionConfig(1.0, 100, 2)) as ctx:
        with pytest.raises(ExecutionHalted, match="retry_limit"):
            await container.aexecute(fails)  # unwrapped fn: the container draws itself
    assert ctx.get_snapshot().retries_used == 2


def test_cancellation_token_first_reason_wins_and_callbacks_once() -> None:
    token = CancellationToken()
    hits: list[str] = []
    remove = token.add_callback(lambda: hits.append("a"))
    token.add_callback(lambda: hits.append("b"))
    remove()
    assert token.cancel("timeout")
    assert not token.cancel("cancelled")
    assert token.reason == "timeout" and hits == ["b"]
    token.add_callback(lambda: hits.append("late"))
    assert hits == ["b", "late"]


def test_timeout_pool_fires_in_deadline_order_without_lost_wakeups() -> None:
    pool = SharedTimeoutPool()
    fired: list[int] = []
    done = threading.Event()
    now = time.monotonic()

    def last() -> None:
        fired.append(3)
        done.set()

    pool.schedule(now + 0.3, last)
    # Scheduled later but due earlier: must wake the waiting worker.
    pool.schedule(now + 0.05, lambda: fired.append(1))
    cancelled = pool.schedule(now + 0.1, lambda: fired.append(2))
    pool.cancel(cancelled)
    assert done.wait(3.0)
    assert fired == [1, 3]
    assert len(pool) == 0


def test_timeout_entry_removed_when_context_exits() -> None:
    pool = SharedTimeoutPool()
    config = ExecutionConfig(1.0, 10, 1, timeout_ms=60_000)
    for _ in range(1000):
        with ExecutionContext(config, timeout_pool=pool):
            pass
    assert len(pool) == 0
    assert len(pool._heap) <= 600  # cancelled entries are compacted, not accumulated


def _state(breaker: CircuitBreaker) -> CircuitState:
    return breaker.state
