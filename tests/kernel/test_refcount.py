"""A finished context is freed by reference counting, not left to the garbage collector.

A reference cycle through a context (its graph pointing back at it, a token's callback, a cancelled
deadline still in the timeout pool's heap) makes every request's context garbage only the cyclic
collector can free: under load its collections then pause the event loop for tens of milliseconds
(bench_loop_lag.py's in-process control went from ~10 to ~25 ms). Each case runs with the
collector off and checks the context is gone the moment the last reference is dropped.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import pytest

from veronica_mw import (
    BudgetPool,
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    Observer,
    VeronicaASGIMiddleware,
    get_current_execution_context,
)
from veronica_mw.kernel.timeout_pool import SharedTimeoutPool

CONFIG = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0, timeout_ms=60_000)


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def calls_sync() -> ExecutionContext:
    ctx = ExecutionContext(CONFIG)
    with ctx:
        ctx.call_llm(lambda: "ok")
        ctx.call_tool(lambda: "ok")
    return ctx


def calls_async() -> ExecutionContext:
    async def answer() -> str:
        return "ok"

    async def run() -> ExecutionContext:
        async with ExecutionContext(CONFIG) as ctx:
            await ctx.acall_llm(answer)
            await ctx.awrap_tool_call(answer)
        return ctx

    return asyncio.run(run())


def two_phase() -> ExecutionContext:
    ctx = ExecutionContext(CONFIG)
    with ctx:
        ctx.begin_call("llm").commit("ok")
    return ctx


def adopted_by_a_layer_below() -> ExecutionContext:
    # What provider SDK instrumentation does under ctx.call_llm: take the running inline call's node.
    from veronica_mw.kernel.context import current_node

    ctx = ExecutionContext(CONFIG)

    def provider_call() -> str:
        node = ctx.graph.get(current_node.get())  # type: ignore[arg-type]
        assert node is not None
        node.commit(cost_usd=0.25)
        return "answer"

    with ctx:
        ctx.call_llm(provider_call)
    return ctx


def tenant_pool() -> ExecutionContext:
    pool = BudgetPool(10.0, window_s=3600, key_func=str)
    ctx = ExecutionContext(CONFIG, budget_parent=pool.ledger("acme"))
    with ctx:
        ctx.call_llm(lambda: "ok")
    return ctx


def token_holder() -> ExecutionContext:
    ctx = ExecutionContext(CONFIG)
    with ctx:
        assert not ctx.cancellation_token.is_cancelled  # the deadline is now in the pool
        ctx.call_llm(lambda: "ok")
    return ctx


def observed() -> ExecutionContext:
    ctx = ExecutionContext(CONFIG, observers=[Observer()])
    with ctx:
        ctx.call_llm(lambda: "ok")
    return ctx


def halted() -> ExecutionContext:
    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=1, max_retries_total=0))
    with ctx:
        ctx.call_llm(lambda: "ok")
        with pytest.raises(ExecutionHalted):
            ctx.call_llm(lambda: "refused")
    return ctx


@pytest.mark.parametrize(
    "run",
    [
        calls_sync,
        calls_async,
        two_phase,
        adopted_by_a_layer_below,
        tenant_pool,
        token_holder,
        observed,
        halted,
    ],
)
def test_a_finished_context_is_freed_by_reference_counting(
    run: Callable[[], ExecutionContext], collector_off: None
) -> None:
    ref = weakref.ref(run())
    assert ref() is None


def test_a_request_context_of_the_asgi_middleware_is_freed_by_reference_counting(collector_off: None) -> None:
    seen: list[weakref.ref[ExecutionContext]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        ctx = get_current_execution_context()
        assert ctx is not None
        ctx.call_llm(lambda: "ok")
        seen.append(weakref.ref(ctx))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    middleware = VeronicaASGIMiddleware(app, config=CONFIG)
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/", "headers": [], "query_string": b""}
    asyncio.run(middleware(scope, receive, send))
    assert sent[0]["status"] == 200
    assert len(seen) == 1 and seen[0]() is None


def test_a_cancelled_deadline_lets_go_of_its_callback() -> None:
    pool = SharedTimeoutPool()
    fired: list[str] = []
    handle = pool.schedule(float("inf"), lambda: fired.append("no"))
    pool.cancel(handle)
    assert not handle.active
    assert handle.callback() is None and fired == []  # a no-op now: the closure is released
