"""Limits hold under real concurrency: threads, asyncio tasks and processes."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading

import pytest

from veronica_mw import Decision, ExecutionConfig, ExecutionContext, ExecutionHalted, WrapOptions


def test_sixteen_threads_times_ten_thousand_calls_never_exceed_limits() -> None:
    config = ExecutionConfig(max_cost_usd=25.0, max_steps=100_000, max_retries_total=500)
    ctx = ExecutionContext(config)
    ran = [0] * 16
    barrier = threading.Barrier(16)

    def worker(i: int) -> None:
        barrier.wait()
        for n in range(10_000):
            if n % 97 == 0:
                try:
                    ctx.call_tool(_raise)
                except (OSError, ExecutionHalted):
                    pass
                continue
            opts = WrapOptions(cost_estimate_hint=0.001, cost_fn=lambda _: 0.001)

            def body(i: int = i) -> None:
                ran[i] += 1

            ctx.wrap_llm_call(body, opts)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    snap = ctx.get_snapshot()
    assert snap.cost_usd_accumulated <= config.max_cost_usd + 1e-9
    assert snap.step_count <= config.max_steps
    assert snap.retries_used <= config.max_retries_total
    assert snap.in_flight == 0 and snap.cost_usd_reserved == pytest.approx(0.0, abs=1e-9)
    # Every successful model call paid exactly 0.001: the ledger matches the work done.
    assert snap.cost_usd_accumulated == pytest.approx(sum(ran) * 0.001)
    assert snap.aborted


def _raise() -> None:
    raise OSError("flaky")


@pytest.mark.anyio
async def test_thousand_asyncio_tasks_share_one_context() -> None:
    config = ExecutionConfig(max_cost_usd=0.5, max_steps=700, max_retries_total=3)
    ctx = ExecutionContext(config)
    ran = 0

    async def model() -> str:
        nonlocal ran
        await asyncio.sleep(0)  # interleave every call with the others
        ran += 1
        return "ok"

    async def task() -> Decision:
        return await ctx.awrap_llm_call(model, WrapOptions(cost_estimate_hint=0.001))

    decisions = await asyncio.gather(*(task() for _ in range(1000)))
    snap = ctx.get_snapshot()
    assert decisions.count(Decision.ALLOW) == ran == 500  # 500 * 0.001 = the $0.50 ceiling
    assert snap.cost_usd_accumulated <= 0.5 + 1e-9
    assert snap.step_count == 500


def _process_worker(steps: int, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    # Each process has its own context and its own timeout-pool thread (fork-safe).
    # The deadline is far enough that the step limit always comes first, even on a loaded machine.
    with ExecutionContext(ExecutionConfig(1.0, steps, 0, timeout_ms=5_000)) as ctx:
        ran = sum(1 for _ in range(steps * 2) if ctx.wrap_tool_call(lambda: None) is Decision.ALLOW)
        fired = threading.Event()
        ctx.cancellation_token.add_callback(fired.set)
        fired.wait(5.0)
        queue.put((ran, ctx.abort_reason, ctx.chain_id))


def test_processes_each_enforce_their_own_limits() -> None:
    # Warm the timeout pool in the parent first, so forked children must restart it.
    with ExecutionContext(ExecutionConfig(1.0, 1, 0, timeout_ms=10_000)):
        pass
    mp = multiprocessing.get_context("fork")
    queue = mp.Queue()
    procs = [mp.Process(target=_process_worker, args=(n, queue)) for n in (3, 5, 7)]
    for p in procs:
        p.start()
    results = sorted(queue.get(timeout=20) for _ in procs)
    for p in procs:
        p.join(10)
    assert [r[0] for r in results] == [3, 5, 7]
    assert all(r[1] == "step_limit" for r in results)
    assert len({r[2] for r in results}) == 3
