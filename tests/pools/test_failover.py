"""Redis going away and coming back: "deny" fails closed, "local" serves within per-process bounds,
and the spend of the outage is reconciled exactly once when Redis returns."""

from __future__ import annotations

import time
from typing import Any

import pytest

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, WrapOptions
from veronica_mw.pools.budget_pool import BudgetPool
from veronica_mw.pools.redis_backend import RedisBudgetBackend

from .conftest import Closer, RedisServer

pytestmark = pytest.mark.redis
CONFIG = ExecutionConfig(max_cost_usd=5.0, max_steps=100, max_retries_total=0)
RETRY = 0.2


def make_pool(closer: Closer, url: str, mode: str, limit: float = 1.0, **kw: Any) -> BudgetPool:
    return BudgetPool(
        limit,
        window_s=3600,
        key_func=str,
        backend=closer(RedisBudgetBackend(url)),
        on_backend_error=mode,
        backend_retry_s=RETRY,
        **kw,
    )


def call(ctx: ExecutionContext, cost: float) -> bool:
    try:
        ctx.call_llm(lambda: "ok", options=WrapOptions(cost_estimate_hint=cost, cost_fn=lambda r: cost))
    except ExecutionHalted:
        return False
    return True


def wait_until_retry() -> None:
    time.sleep(RETRY + 0.05)  # the pool retries the backend only after backend_retry_s


def test_deny_refuses_with_503_and_never_overspends(redis_server: RedisServer, closer: Closer) -> None:
    pool = make_pool(closer, redis_server.url, "deny")
    ctx = ExecutionContext(CONFIG, budget_parent=pool.admit("t").ledger)
    with ctx:
        assert call(ctx, 0.30)
        in_flight = ctx.begin_call("llm", WrapOptions(cost_estimate_hint=0.40))  # reserved in Redis
        redis_server.kill()
        in_flight.commit(cost_usd=0.40)  # settles during the outage: queued, not lost
        with pytest.raises(ExecutionHalted) as info:
            ctx.call_llm(lambda: "x", options=WrapOptions(cost_estimate_hint=0.01))
    # Mid-request the outage halts the call the same way admission refuses: fail closed, 503.
    assert info.value.reason == "policy_denied"
    assert info.value.snapshot is not None and info.value.snapshot.http_status == 503
    assert info.value.retry_after_s == RETRY
    assert [e.kind for e in ctx.get_events()] == ["budget_backend_unavailable"]
    adm = pool.admit("t")
    assert (adm.allowed, adm.status, adm.reason, adm.retry_after_s) == (False, 503, "policy_denied", RETRY)
    assert "unavailable" in adm.detail
    redis_server.start()  # append-only file: the acknowledged state survives the crash
    # This "worker" gets no more traffic, yet its queued commit reaches Redis (a background retry),
    # so another process (a fresh pool) sees the reconciled total.
    other = make_pool(closer, redis_server.url, "deny")
    deadline = time.monotonic() + 10  # hang guard
    while other.usage("t").spent_usd < 0.69 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert other.usage("t").spent_usd == pytest.approx(0.70)
    assert pool.admit("t").allowed
    usage = pool.usage("t")
    assert usage.spent_usd == pytest.approx(0.70)
    assert (usage.reserved_usd, usage.source) == (0.0, "backend")


def test_local_serves_within_per_process_bounds_and_reconciles(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture, closer: Closer
) -> None:
    workers = [make_pool(closer, redis_server.url, "local") for _ in range(3)]  # three "processes"
    spent_before = 0.0
    for pool in workers:  # each sees the shared state before the outage
        ctx = ExecutionContext(CONFIG, budget_parent=pool.ledger("t"))
        with ctx:
            assert call(ctx, 0.10)
        spent_before += 0.10
    redis_server.kill()
    served = []
    for pool in workers:
        adm = pool.admit("t")
        assert adm.allowed and adm.fallback
        ctx = ExecutionContext(CONFIG, budget_parent=adm.ledger)
        with ctx:
            n = 0
            while call(ctx, 0.05):
                n += 1
        served.append(n)
        assert [e.kind for e in ctx.get_events()] == ["budget_backend_fallback"]
    # Each process is bounded by what it last saw left: the first saw $0.10 spent ($0.90 left = 18
    # calls), the second $0.20, the third $0.30. Together they exceed the pool (the documented
    # price of "local"), but none of them exceeds it on its own.
    assert served == [18, 16, 14]
    assert "lost its backend" in caplog.text
    redis_server.start()
    wait_until_retry()
    for pool in workers:
        pool.admit("t")  # the first contact pushes the outage spend
    total = spent_before + 0.05 * sum(served)
    for pool in workers:
        assert pool.usage("t").spent_usd == pytest.approx(total)  # exactly once, no double count
    assert "backend is back" in caplog.text


def test_outage_spend_of_a_past_window_is_not_booked_in_the_new_one(
    redis_server: RedisServer, closer: Closer
) -> None:
    clock = [7200.0 * 500 + 10.0]
    pool = make_pool(closer, redis_server.url, "local", clock=lambda: clock[0])
    ctx = ExecutionContext(CONFIG, budget_parent=pool.ledger("t"))
    with ctx:
        assert call(ctx, 0.10)
        redis_server.kill()
        assert call(ctx, 0.20)  # served locally, in the old window
    clock[0] += 3600.0  # the window turns during the outage
    redis_server.start()
    wait_until_retry()
    assert pool.usage("t").spent_usd == 0.0  # the old window's outage spend stays in the old window
    ctx = ExecutionContext(CONFIG, budget_parent=pool.ledger("t"))
    with ctx:
        assert call(ctx, 0.05)
    assert pool.usage("t").spent_usd == pytest.approx(0.05)
