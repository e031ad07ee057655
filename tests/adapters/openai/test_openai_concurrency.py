"""Concurrent requests reserve their worst case before sending, so together they never overshoot
``max_cost_usd``: 16 threads and 200 asyncio tasks against one context."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.kernel.pricing import TokenUsage, price_usage

from ...support.fake_provider import FakeProvider, cost_of, prompt_tokens

MODEL = "gpt-4o-mini"
MESSAGES: list[Any] = [{"role": "user", "content": "run in parallel"}]
MAX_TOKENS = 10_000


def _worst_case() -> float:
    """What the adapter reserves for one request below (its estimate of the prompt, + max_tokens)."""
    tokens_in = -(-sum(len(s) for m in MESSAGES for s in m.values()) // 4)
    return price_usage(TokenUsage(tokens_in, MAX_TOKENS), MODEL, "openai")


def test_sixteen_threads_never_overshoot(
    server: FakeProvider, instrumented: None, make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(max_retries=0)
    budget = 5.5 * _worst_case()  # room for five reservations in flight, not six
    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=budget, max_steps=100, max_retries_total=0))
    refused: list[BaseException] = []
    server.hold()

    def worker() -> None:
        try:
            client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=MAX_TOKENS)
        except ExecutionHalted as exc:
            refused.append(exc)

    with ctx:  # each thread runs in a copy of this contextvars context: the same current context
        threads = [threading.Thread(target=contextvars.copy_context().run, args=(worker,)) for _ in range(16)]
    for thread in threads:
        thread.start()
    assert server.wait_for_requests(5)
    for _ in range(600):  # every thread that is not held in flight gets refused
        if len(refused) == 11:
            break
        threading.Event().wait(0.05)
    server.release()
    for thread in threads:
        thread.join(timeout=60)
    snap = ctx.get_snapshot()
    assert len(refused) == 11 and {e.reason for e in refused} == {"budget_exceeded"}  # type: ignore[attr-defined]
    assert server.count() == 5 and snap.step_count == 5
    assert snap.cost_usd_accumulated == pytest.approx(cost_of(server.reported, "openai"))
    assert snap.cost_usd_accumulated <= budget and snap.cost_usd_reserved == pytest.approx(0.0, abs=1e-12)


@pytest.mark.anyio
async def test_two_hundred_tasks_never_overshoot(
    server: FakeProvider, instrumented: None, make_aclient: Callable[..., openai.AsyncOpenAI]
) -> None:
    client = make_aclient(max_retries=0)
    budget = 20.5 * _worst_case()
    server.hold()
    async with ExecutionContext(
        ExecutionConfig(max_cost_usd=budget, max_steps=1000, max_retries_total=0)
    ) as ctx:

        async def one() -> str:
            try:
                await client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=MAX_TOKENS)
            except ExecutionHalted:
                return "refused"
            return "sent"

        tasks = [asyncio.create_task(one()) for _ in range(200)]
        assert await asyncio.to_thread(server.wait_for_requests, 20)
        while sum(t.done() for t in tasks) < 180:
            await asyncio.sleep(0.01)
        server.release()
        outcomes = await asyncio.gather(*tasks)
    snap = ctx.get_snapshot()
    assert outcomes.count("sent") == 20 and server.count() == 20 and snap.step_count == 20
    assert snap.cost_usd_accumulated <= budget


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    limits=st.lists(st.integers(min_value=0, max_value=20_000), min_size=1, max_size=8),
    budget_calls=st.floats(min_value=0.0, max_value=4.0),
)
def test_committed_cost_never_exceeds_the_budget(
    server: FakeProvider,
    instrumented: None,
    limits: list[int],
    budget_calls: float,
    make_client: Callable[..., openai.OpenAI],
) -> None:
    server.reset()
    client = make_client(max_retries=0)
    budget = budget_calls * _worst_case()
    sent = 0
    with ExecutionContext(ExecutionConfig(max_cost_usd=budget, max_steps=50, max_retries_total=0)) as ctx:
        for max_tokens in limits:
            try:
                client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=max_tokens)
            except ExecutionHalted:
                break
            sent += 1
            tokens_in = server.reported[-1].input_tokens
            assert tokens_in == prompt_tokens({"messages": MESSAGES})
    snap = ctx.get_snapshot()
    assert server.count() == sent == snap.step_count
    assert snap.cost_usd_accumulated <= budget + 1e-12
