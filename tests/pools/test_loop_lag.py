"""The event loop is never blocked on a slow Redis: a probe measures how late the loop wakes it while
requests reserve and settle through a proxy that delays every Redis reply. The async path must stay
far below one delay; the same requests on the sync path (a sync call in an async app) block it for
at least one delay each, which shows the probe sees blocking. Precise figures: benchmarks/."""

from __future__ import annotations

import asyncio
import statistics
import time

import pytest

from veronica_mw import ExecutionConfig, ExecutionContext, WrapOptions
from veronica_mw.pools.budget_pool import BudgetPool
from veronica_mw.pools.redis_backend import RedisBudgetBackend

from ._delay_proxy import DelayProxy
from .conftest import RedisServer

pytestmark = pytest.mark.redis
DELAY = 0.08
CONFIG = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0)
CALL = WrapOptions(cost_estimate_hint=0.001, cost_fn=lambda r: 0.001)


async def probe(stop: asyncio.Event, windows: list[float], window_s: float = 0.25) -> None:
    """The worst oversleep of a 5 ms sleep in each window of ``window_s``."""
    worst, window_end = 0.0, time.perf_counter() + window_s
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(0.005)
        now = time.perf_counter()
        worst = max(worst, now - start - 0.005)
        if now >= window_end:
            windows.append(worst)
            worst, window_end = 0.0, now + window_s
    windows.append(worst)


async def load(pool: BudgetPool, tasks: int, requests: int, sync_calls: bool) -> None:
    async def client(n: int) -> None:
        for _ in range(requests):
            adm = await pool.aadmit(f"tenant-{n % 3}")
            assert adm.allowed
            ctx = ExecutionContext(CONFIG, budget_parent=adm.ledger)
            for _ in range(2):
                if sync_calls:
                    ctx.call_llm(lambda: "ok", options=CALL)  # the sync path, even on the loop
                else:
                    await ctx.acall_llm(lambda: "ok", options=CALL)

    await asyncio.gather(*(client(n) for n in range(tasks)))


def lag_under_load(url: str, tasks: int, requests: int, sync_calls: bool) -> list[float]:
    async def main() -> list[float]:
        backend = RedisBudgetBackend(url, socket_timeout=10.0)
        pool = BudgetPool(100.0, window_s=3600, key_func=str, backend=backend)
        await load(pool, 1, 1, sync_calls)  # connect, load the scripts
        windows: list[float] = []
        stop = asyncio.Event()
        watcher = asyncio.ensure_future(probe(stop, windows))
        try:
            await load(pool, tasks, requests, sync_calls)
        finally:
            stop.set()
            await watcher
            await backend.aclose()
        return windows

    return asyncio.run(main())


def test_async_path_does_not_block_the_loop_on_a_slow_redis(redis_server: RedisServer) -> None:
    with DelayProxy(redis_server.port, DELAY) as proxy:
        windows = lag_under_load(proxy.url, tasks=20, requests=4, sync_calls=False)
        control = lag_under_load(proxy.url, tasks=4, requests=1, sync_calls=True)
    # 20 requests x 5 round trips of 80 ms each in flight at once: a blocking client would stall
    # the loop for seconds; awaited, the loop only ever waits for CPU.
    assert len(windows) >= 4
    assert statistics.median(windows) < DELAY / 2, windows
    # The control: each sync round trip blocks the loop for a whole delay.
    assert statistics.median(control) >= DELAY / 2, control


def test_cancelled_while_redis_answers_nothing_stays_reserved(redis_server: RedisServer) -> None:
    async def main(url: str) -> tuple[float, float]:
        backend = RedisBudgetBackend(url, socket_timeout=10.0)
        pool = BudgetPool(1.0, window_s=3600, key_func=str, backend=backend)
        ledger = pool.ledger("t")
        reserve = asyncio.ensure_future(ledger.areserve(0.25))
        await asyncio.sleep(DELAY / 4)  # sent, not answered
        reserve.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reserve
        assert await ledger.areserve(0.5)  # the pool still works
        settle = asyncio.ensure_future(ledger.asettle(0.5, 0.125))
        await asyncio.sleep(DELAY / 4)
        settle.cancel()  # the settle is sent again and finishes anyway
        with pytest.raises(asyncio.CancelledError):
            await settle
        deadline = time.monotonic() + 30  # hang guard: polls what Redis holds
        while time.monotonic() < deadline:
            usage = pool.usage("t")
            if usage.reserved_usd == 0.0 and usage.spent_usd > 0:
                break
            await asyncio.sleep(0.05)
        await backend.aclose()
        backend.close()
        return usage.reserved_usd, usage.spent_usd

    with DelayProxy(redis_server.port, DELAY) as proxy:
        reserved, spent = asyncio.run(main(proxy.url))
    assert reserved == 0.0 and spent == pytest.approx(0.125)
