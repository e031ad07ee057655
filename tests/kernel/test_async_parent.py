"""An async budget parent: awaited by the coroutine API (abegin_call, awrap_*, acall_*, acommit...),
called synchronously by the sync API even inside an event loop, and settled exactly once on every
outcome (success, failure, refusal, cancellation)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from veronica_mw import Decision, ExecutionConfig, ExecutionContext, ExecutionHalted, WrapOptions

pytestmark = pytest.mark.anyio
HINT = WrapOptions(cost_estimate_hint=0.1, cost_fn=lambda r: 0.05)


class Parent:
    """Records which of its methods ran; ``gate`` makes areserve wait until it is set."""

    def __init__(self, allow: int = 100) -> None:
        self.allow = allow
        self.calls: list[tuple[str, float, float]] = []
        self.gate: asyncio.Event | None = None

    def reserve(self, amount_usd: float) -> bool:
        self.calls.append(("reserve", amount_usd, 0.0))
        return self._take()

    def settle(self, reserved_usd: float, actual_usd: float) -> None:
        self.calls.append(("settle", reserved_usd, actual_usd))

    async def areserve(self, amount_usd: float) -> bool:
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(0)
        self.calls.append(("areserve", amount_usd, 0.0))
        return self._take()

    async def asettle(self, reserved_usd: float, actual_usd: float) -> None:
        await asyncio.sleep(0)
        self.calls.append(("asettle", reserved_usd, actual_usd))

    def retry_after_s(self) -> float | None:
        return None

    def _take(self) -> bool:
        self.allow -= 1
        return self.allow >= 0


class SyncOnlyParent:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def reserve(self, amount_usd: float) -> bool:
        self.calls.append("reserve")
        return True

    def settle(self, reserved_usd: float, actual_usd: float) -> None:
        self.calls.append("settle")

    def retry_after_s(self) -> float | None:
        return None


def context(parent: Any, **limits: Any) -> ExecutionContext:
    config = ExecutionConfig(**{"max_cost_usd": 10.0, "max_steps": 10, "max_retries_total": 5, **limits})
    return ExecutionContext(config, budget_parent=parent)


async def test_coroutine_api_awaits_the_parent() -> None:
    parent = Parent()
    ctx = context(parent)

    async def model() -> str:
        return "ok"

    assert await ctx.acall_llm(model, options=HINT) == "ok"
    assert await ctx.awrap_tool_call(lambda: "t", options=HINT) is Decision.ALLOW
    node = await ctx.abegin_call("llm", HINT)
    await node.acommit("x")
    assert parent.calls == [("areserve", 0.1, 0.0), ("asettle", 0.1, 0.05)] * 3
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(0.15)


async def test_sync_calls_in_an_async_app_keep_the_sync_path() -> None:
    parent = Parent()
    ctx = context(parent)
    assert ctx.call_llm(lambda: "ok", options=HINT) == "ok"
    ctx.begin_call("tool", HINT).commit()
    assert [c[0] for c in parent.calls] == ["reserve", "settle", "reserve", "settle"]


async def test_a_parent_without_coroutines_is_called_synchronously() -> None:
    parent = SyncOnlyParent()
    ctx = context(parent)
    await ctx.acall_llm(lambda: "ok", options=HINT)
    node = await ctx.abegin_call("llm")
    await node.arelease()
    assert parent.calls == ["reserve", "settle", "reserve", "settle"]


async def test_refusal_halts_and_gives_the_step_back() -> None:
    parent = Parent(allow=1)
    ctx = context(parent)
    await ctx.acall_llm(lambda: "ok", options=HINT)
    with pytest.raises(ExecutionHalted) as info:
        await ctx.acall_llm(lambda: "never", options=HINT)
    assert info.value.reason == "budget_exceeded"
    snap = ctx.get_snapshot()
    assert snap.step_count == 1 and snap.cost_usd_reserved == 0.0
    assert [c[0] for c in parent.calls] == ["areserve", "asettle", "areserve"]


async def test_failure_and_release_settle_nothing_spent() -> None:
    parent = Parent()
    ctx = context(parent)

    async def broken() -> None:
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        await ctx.acall_llm(broken, options=HINT)
    node = await ctx.abegin_call("llm", HINT)
    await node.afail(TimeoutError("slow"))
    node = await ctx.abegin_call("llm", HINT)
    await node.arelease()
    assert parent.calls[1::2] == [("asettle", 0.1, 0.0)] * 3
    snap = ctx.get_snapshot()
    assert snap.retries_used == 2 and snap.step_count == 2 and snap.cost_usd_accumulated == 0.0


async def test_cancelled_call_keeps_its_reservation_as_spent() -> None:
    parent = Parent()
    ctx = context(parent)
    started = asyncio.Event()

    async def slow() -> None:
        started.set()
        await asyncio.sleep(30)

    task = asyncio.ensure_future(ctx.acall_llm(slow, options=HINT))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert parent.calls == [("areserve", 0.1, 0.0), ("asettle", 0.1, 0.1)]
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(0.1)


async def test_cancelled_while_the_parent_answers_never_runs_the_call() -> None:
    parent = Parent()
    parent.gate = asyncio.Event()
    ctx = context(parent)
    ran: list[int] = []
    task = asyncio.ensure_future(ctx.acall_llm(lambda: ran.append(1), options=HINT))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ran == []
    snap = ctx.get_snapshot()
    assert snap.step_count == 0 and snap.in_flight == 0 and snap.cost_usd_reserved == 0.0


async def test_same_key_is_one_node_and_one_reservation() -> None:
    parent = Parent()
    ctx = context(parent)
    first = await ctx.abegin_call("llm", HINT, key="run-1")
    again = await ctx.abegin_call("llm", HINT, key="run-1")
    assert first is again
    await first.acommit()
    await again.acommit()  # a second settle of one node is a no-op
    assert [c[0] for c in parent.calls] == ["areserve", "asettle"]


async def test_concurrent_tasks_never_exceed_the_parent() -> None:
    parent = Parent(allow=7)
    ctx = context(parent, max_steps=100)

    async def call() -> str:
        return await ctx.acall_llm(lambda: "ok", options=HINT)  # type: ignore[no-any-return]

    results = await asyncio.gather(*(call() for _ in range(20)), return_exceptions=True)
    assert results.count("ok") == 7
    assert sum(isinstance(r, ExecutionHalted) for r in results) == 13
    assert sum(1 for c in parent.calls if c[0] == "asettle") == 7
