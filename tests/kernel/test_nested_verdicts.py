"""A call that ran is reported ALLOW however its siblings fare: contexts nested in one step-limited
parent, driven from many asyncio tasks or threads, return ALLOW for exactly the calls that ran."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from veronica_mw import Decision, ExecutionConfig, ExecutionContext

GENEROUS = ExecutionConfig(max_cost_usd=100.0, max_steps=10_000, max_retries_total=100)


@pytest.mark.anyio
async def test_ten_tasks_nested_in_a_25_step_context_get_exactly_25_allows() -> None:
    parent = ExecutionContext(ExecutionConfig(max_cost_usd=100.0, max_steps=25, max_retries_total=0))
    ran = 0
    decisions: list[Decision] = []

    async def model() -> str:
        nonlocal ran
        ran += 1
        await asyncio.sleep(0)  # every task is mid-call while the others are admitted
        return "ok"

    async def agent() -> None:
        child = ExecutionContext(GENEROUS, parent=parent)
        for _ in range(10):
            decisions.append(await child.awrap_llm_call(model))
            await asyncio.sleep(0)

    await asyncio.gather(*(agent() for _ in range(10)))
    assert ran == 25
    assert decisions.count(Decision.ALLOW) == 25
    assert decisions.count(Decision.HALT) == 75
    assert parent.get_snapshot().step_count == 25
    assert parent.get_snapshot().abort_reason == "step_limit"


@pytest.mark.anyio
async def test_tasks_entering_their_own_context_inside_the_parent_nest_and_get_exact_allows() -> None:
    ran = 0
    decisions: list[Decision] = []

    async def model() -> str:
        nonlocal ran
        ran += 1
        await asyncio.sleep(0)
        return "ok"

    async def agent() -> None:
        async with ExecutionContext(GENEROUS) as child:  # nests in the current context
            for _ in range(10):
                decisions.append(await child.awrap_llm_call(model))
                await asyncio.sleep(0)

    async with ExecutionContext(ExecutionConfig(max_cost_usd=100.0, max_steps=25, max_retries_total=0)):
        await asyncio.gather(*(agent() for _ in range(10)))
    assert (ran, decisions.count(Decision.ALLOW)) == (25, 25)


def test_eight_threads_nested_in_a_1000_step_context_get_exactly_1000_allows() -> None:
    parent = ExecutionContext(ExecutionConfig(max_cost_usd=100.0, max_steps=1000, max_retries_total=0))
    lock = threading.Lock()
    ran = [0]
    allowed = [0]
    start = threading.Barrier(8)

    def model() -> str:
        with lock:
            ran[0] += 1
        time.sleep(0.0001)  # let the other threads be admitted and refused meanwhile
        return "ok"

    def agent() -> None:
        child = ExecutionContext(GENEROUS, parent=parent)
        start.wait()
        for _ in range(200):
            if child.wrap_llm_call(model) is Decision.ALLOW:
                with lock:
                    allowed[0] += 1

    threads = [threading.Thread(target=agent) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert ran[0] == 1000
    assert allowed[0] == 1000
