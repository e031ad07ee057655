"""LocalBudgetBackend: the documented rules (model-checked with hypothesis) and thread/asyncio safety."""

from __future__ import annotations

import asyncio
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, WrapOptions
from veronica_mw.pools._backend import LocalBudgetBackend, Op
from veronica_mw.pools.budget_pool import BudgetPool

from ._model import RTTL, Model, op

LIMIT = 1_000


class LocalBackendMachine(RuleBasedStateMachine):
    """Random sequences of reserve/settle/time steps agree with the reference model exactly."""

    def __init__(self) -> None:
        super().__init__()
        self.backend = LocalBudgetBackend()
        self.model = Model(LIMIT, limit_steps=12)
        self.now = 0
        self.win = 1
        self.ids: list[str] = []
        self.counter = 0
        self.late = 0  # actual cost committed after its reservation was reclaimed (may overshoot)

    def _op(self) -> Op:
        return op(self.now, self.win)

    @rule(amount=st.integers(0, 400))
    def reserve(self, amount: int) -> None:
        self.counter += 1
        rid = f"r{self.counter}"
        got = self.backend.reserve(self._op(), rid, amount, LIMIT, 12)
        assert got == self.model.reserve(self._op(), rid, amount)
        if got.ok:
            self.ids.append(rid)

    @precondition(lambda self: self.ids)
    @rule(index=st.integers(0, 50), fraction=st.sampled_from([0.0, 0.5, 1.0]))
    def settle(self, index: int, fraction: float) -> None:
        rid = self.ids.pop(index % len(self.ids))
        self.model.state(self._op())  # apply reclaims first, so we know whether this one was reclaimed
        late = rid not in self.model.holds
        actual = int(self.model.holds.get(rid, 100) * fraction)
        assert self.backend.settle(self._op(), rid, actual) == self.model.settle(self._op(), rid, actual)
        if late:
            self.late += actual

    @rule(ms=st.sampled_from([1, 300, RTTL, 2 * RTTL]))
    def advance(self, ms: int) -> None:
        self.now += ms

    @rule()
    def next_window(self) -> None:
        self.win += 1

    @invariant()
    def agrees_and_bounded(self) -> None:
        state = self.backend.state(self._op())
        assert state == self.model.state(self._op())
        # Actual costs here never exceed what was reserved, so only commits that arrive after their
        # reservation was reclaimed (a "crashed" worker coming back) can push past the limit.
        assert state.spent + state.reserved <= LIMIT + self.late


TestLocalBackendModel = LocalBackendMachine.TestCase
TestLocalBackendModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plans=st.lists(
        st.lists(st.tuples(st.integers(0, 300), st.integers(0, 300)), max_size=30), min_size=2, max_size=6
    )
)
def test_threads_never_overshoot(plans: list[list[tuple[int, int]]]) -> None:
    backend = LocalBudgetBackend()
    settled: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(plans))

    def worker(n: int, plan: list[tuple[int, int]]) -> None:
        barrier.wait()
        for i, (amount, actual) in enumerate(plan):
            rid = f"{n}-{i}"
            if backend.reserve(op(0), rid, amount, LIMIT, -1).ok:
                actual = min(actual, amount)
                assert backend.settle(op(0), rid, actual)
                with lock:
                    settled.append(actual)

    threads = [threading.Thread(target=worker, args=(n, plan)) for n, plan in enumerate(plans)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    state = backend.state(op(0))
    assert state.reserved == 0
    assert state.spent == sum(settled) <= LIMIT


@settings(max_examples=25, deadline=None)
@given(n_tasks=st.integers(2, 40), hint=st.sampled_from([0.01, 0.03, 0.07]))
def test_asyncio_tasks_through_the_kernel(n_tasks: int, hint: float) -> None:
    """Interleaved coroutines of one tenant (each its own request context) share one pool."""
    pool = BudgetPool(0.25, window_s=3600, key_func=lambda r: "t")
    config = ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0)

    async def request() -> int:
        ctx = ExecutionContext(config, budget_parent=pool.ledger("t"))
        async with ctx:

            async def call() -> str:
                await asyncio.sleep(0)  # let other tasks reserve while this one is in flight
                return "ok"

            try:
                await ctx.acall_llm(
                    call, options=WrapOptions(cost_estimate_hint=hint, cost_fn=lambda r: hint)
                )
            except ExecutionHalted as exc:
                assert exc.reason == "budget_exceeded"
                return 0
            return 1

    async def main() -> list[int]:
        return await asyncio.gather(*(request() for _ in range(n_tasks)))

    served = sum(asyncio.run(main()))
    fits = int(round(0.25 / hint, 6))
    assert served == min(n_tasks, fits)
    usage = pool.usage("t")
    assert usage.reserved_usd == 0
    assert usage.spent_usd == pytest.approx(served * hint, abs=1e-9)
    assert usage.spent_usd <= 0.25 + 1e-9


def test_async_state_matches_sync() -> None:
    backend = LocalBudgetBackend()
    assert backend.reserve(op(0), "a", 10, LIMIT, -1).ok
    assert asyncio.run(backend.astate(op(0))) == backend.state(op(0))


def test_idle_buckets_are_evicted_only_after_their_expiry() -> None:
    backend = LocalBudgetBackend(max_buckets=2)
    backend.reserve(op(0, bucket="a"), "1", 5, LIMIT, -1)
    backend.settle(op(0, bucket="a"), "1", 5)
    backend.state(op(0, bucket="b"))
    backend.state(op(10, bucket="c"))  # a and b are still live: nothing evicted, a keeps its spend
    assert backend.state(op(20, bucket="a")).spent == 5
    backend.state(op(200_000, bucket="d"))  # past every TTL: the idle ones go
    assert backend.state(op(200_001, bucket="a")).spent == 0
