"""What was sent is what is counted: a step admitted before its context halted still sends its
request (only calls admitted after the halt are refused), so max_steps=N means exactly N requests
however many run in parallel; a call cancelled before its request was built gives its reservation
back, one cancelled after it was sent keeps it. Through the real OpenAI SDK, under a layer above
(``ctx.call_llm``/``begin_call`` + the kernel's current node) that admitted the step first."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

import openai
import pytest

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, HaltReason
from veronica_mw.kernel.context import current_node

from ...support.fake_provider import FakeProvider

MODEL = "gpt-4o-mini"
MESSAGES: list[Any] = [{"role": "user", "content": "Say hi."}]


def _limits(steps: int) -> ExecutionConfig:
    return ExecutionConfig(max_cost_usd=10.0, max_steps=steps, max_retries_total=0)


async def _outer_step(ctx: ExecutionContext, client: openai.AsyncOpenAI, go: asyncio.Event) -> str:
    """A layer above (an agent framework) admits the step, waits, then its SDK request is sent."""
    node = ctx.begin_call("llm")  # admitted with no reservation: the provider layer tops it up
    token = current_node.set(node.node_id)
    try:
        await go.wait()
        reply = await client.chat.completions.create(model=MODEL, messages=MESSAGES)
    finally:
        current_node.reset(token)
    node.commit(reply)
    return reply.choices[0].message.content or ""


@pytest.mark.anyio
async def test_three_parallel_steps_admitted_before_the_halt_all_send(
    make_aclient: Any, server: FakeProvider
) -> None:
    client = make_aclient()
    go = asyncio.Event()
    ctx = ExecutionContext(_limits(3))
    with ctx:
        admitted = [asyncio.create_task(_outer_step(ctx, client, go)) for _ in range(3)]
        await asyncio.sleep(0)  # all three admitted
        with pytest.raises(ExecutionHalted) as caught:
            ctx.begin_call("llm")  # the fourth: refused, and the context halts
        assert caught.value.reason == HaltReason.STEP_LIMIT and ctx.aborted
        go.set()
        replies = await asyncio.gather(*admitted)
    assert len(replies) == 3 and server.count() == 3
    assert ctx.get_snapshot().step_count == 3
    assert all(n.status == "ok" and n.cost_usd > 0 for n in ctx.graph.nodes())


def test_eight_threads_at_max_steps_five_send_exactly_five(
    client: openai.OpenAI, server: FakeProvider
) -> None:
    ctx = ExecutionContext(_limits(5))
    halts: list[str] = []
    lock = threading.Lock()

    def halted() -> None:  # the five admitted wait until the three others were refused
        while not ctx.aborted:
            threading.Event().wait(0.005)

    barrier = threading.Barrier(5, action=halted, timeout=60)

    def work() -> None:  # a layer above admits the step, then its SDK request is sent
        try:
            node = ctx.begin_call("llm")
        except ExecutionHalted as refused:
            with lock:
                halts.append(refused.reason)
            return
        token = current_node.set(node.node_id)
        try:
            barrier.wait()
            node.commit(client.chat.completions.create(model=MODEL, messages=MESSAGES))
        finally:
            current_node.reset(token)

    with ctx:
        # each thread in a copy of this context's variables, as veronica-mw run starts them
        threads = [threading.Thread(target=contextvars.copy_context().run, args=(work,)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert halts == ["step_limit"] * 3
    assert server.count() == 5 and ctx.get_snapshot().step_count == 5


class _Gated(openai.AsyncOpenAI):
    """An async client whose option preparation (an SDK hook run before each request is built)
    waits for the test: the request is in the SDK but nothing has been sent yet."""

    gate: asyncio.Event

    async def _prepare_options(self, options: Any) -> Any:
        await self.gate.wait()
        return await super()._prepare_options(options)


@pytest.mark.anyio
async def test_a_call_cancelled_before_its_request_was_built_gives_its_reservation_back(
    server: FakeProvider, instrumented: None
) -> None:
    client = _Gated(base_url=server.openai_url, api_key="test", max_retries=0)
    client.gate = asyncio.Event()
    with ExecutionContext(_limits(5)) as ctx:
        task = asyncio.create_task(client.chat.completions.create(model=MODEL, messages=MESSAGES))
        while ctx.get_snapshot().in_flight == 0:
            await asyncio.sleep(0.001)
        assert ctx.get_snapshot().cost_usd_reserved > 0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        snap = ctx.get_snapshot()
    await client.close()
    assert server.count() == 0
    assert snap.cost_usd_accumulated == 0.0 and snap.cost_usd_reserved == 0.0 and snap.step_count == 0


@pytest.mark.anyio
async def test_a_call_cancelled_after_its_request_was_sent_keeps_its_reservation(
    make_aclient: Any, server: FakeProvider
) -> None:
    client = make_aclient()
    server.hold()
    with ExecutionContext(_limits(5)) as ctx:
        task = asyncio.create_task(client.chat.completions.create(model=MODEL, messages=MESSAGES))
        assert await asyncio.to_thread(server.wait_for_requests, 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        snap = ctx.get_snapshot()
        server.release()
    (node,) = ctx.graph.nodes()
    assert server.count() == 1 and node.reserved_usd > 0
    assert snap.cost_usd_accumulated == pytest.approx(node.reserved_usd) and snap.step_count == 1
