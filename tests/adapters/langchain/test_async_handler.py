"""The async twin of the callback handler: awaited on the loop (no thread-pool hop), attached by the
zero-config hook only inside an execution context, halts unchanged from ainvoke/astream/LangGraph
async graphs, awaited inline (no Task per event), and other handlers' coroutines still awaited
when it halts a run."""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from veronica_mw import CallNode, ExecutionConfig, ExecutionContext, ExecutionHalted, Observer
from veronica_mw.adapters.langchain import VeronicaAsyncCallbackHandler, VeronicaCallbackHandler

from .fakes import PRICE, CountingChatModel, priced_message
from .test_handler import UsageStreamingChatModel

pytestmark = pytest.mark.anyio


def limits(**kwargs: Any) -> ExecutionConfig:
    base: dict[str, Any] = {"max_cost_usd": 100.0, "max_steps": 100, "max_retries_total": 0}
    return ExecutionConfig(**{**base, **kwargs})


def model() -> CountingChatModel:
    return CountingChatModel(responses=[priced_message()])


class Threads(Observer):
    """Records the thread every kernel notification about a call arrives on."""

    def __init__(self) -> None:
        self.threads: list[int] = []

    def call_started(self, ctx: ExecutionContext, node: CallNode) -> None:
        self.threads.append(threading.get_ident())

    def call_ended(self, ctx: ExecutionContext, node: CallNode, error: BaseException | None) -> None:
        self.threads.append(threading.get_ident())


def veronica_handlers(config: RunnableConfig) -> list[BaseCallbackHandler]:
    manager: Any = config.get("callbacks")
    handlers = list(getattr(manager, "handlers", None) or ())
    return [h for h in handlers if type(h).__module__.startswith("veronica_mw.")]


# -- the zero-config hook attaches nothing outside a context, the right twin inside one ------------------


async def test_no_handler_is_attached_outside_a_context() -> None:
    seen: list[list[BaseCallbackHandler]] = []

    def record(x: int, config: RunnableConfig) -> int:
        seen.append(veronica_handlers(config))
        return x

    probe: RunnableLambda[int, int] = RunnableLambda(record)
    await probe.ainvoke(1)
    probe.invoke(1)
    assert seen == [[], []]


async def test_async_runs_get_the_async_twin_and_sync_runs_the_sync_handler() -> None:
    seen: list[list[str]] = []

    def record(x: int, config: RunnableConfig) -> int:
        seen.append([type(h).__name__ for h in veronica_handlers(config)])
        return x

    async def arecord(x: int, config: RunnableConfig) -> int:
        return record(x, config)

    with ExecutionContext(limits()):
        await RunnableLambda(record, afunc=arecord).ainvoke(1)
        RunnableLambda(record).invoke(1)
    assert seen == [["_AsyncAutoHandler"], ["_AutoHandler"]]


async def test_async_run_steps_are_begun_and_settled_on_the_loop_thread() -> None:
    observer = Threads()
    m = model()
    async with ExecutionContext(limits(), observers=[observer]) as ctx:
        for _ in range(3):
            await m.ainvoke("hi")
    assert m.calls == 3
    assert observer.threads == [threading.get_ident()] * 6  # never LangChain's executor
    snap = ctx.get_snapshot()
    assert snap.step_count == 3 and snap.cost_usd_accumulated == pytest.approx(3 * PRICE)


def tasks_made(run: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[int]]:
    """How many asyncio tasks ``run()`` creates (through the loop's task factory)."""

    async def count() -> int:
        loop = asyncio.get_running_loop()
        made = 0

        def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
            nonlocal made
            made += 1
            return asyncio.Task(coro, loop=loop, **kwargs)

        previous = loop.get_task_factory()
        loop.set_task_factory(factory)
        try:
            await run()
        finally:
            loop.set_task_factory(previous)
        return made

    return count


@pytest.mark.parametrize("explicit", [False, True])
async def test_the_async_twin_is_awaited_inline_not_as_a_task_per_event(explicit: bool) -> None:
    # A non-inline async handler gets one Task (and one loop turn) per event from LangChain's
    # gather; inline, a run makes exactly the tasks it makes with no handler at all.
    m = model()
    bare = await tasks_made(lambda: m.ainvoke("hi"))()
    async with ExecutionContext(limits()) as ctx:
        config: RunnableConfig = {"callbacks": [VeronicaAsyncCallbackHandler(ctx)]} if explicit else {}
        contained = await tasks_made(lambda: m.ainvoke("hi", config))()
    assert m.calls == 2 and ctx.get_snapshot().step_count == 1
    assert contained == bare


async def test_sync_model_streamed_from_async_code_is_counted_once_and_priced() -> None:
    # No native async: LangChain runs _stream in a thread and reports tokens from there, where
    # the async twin stands aside; the step is still begun and settled on the loop.
    m = UsageStreamingChatModel(messages=iter([priced_message("a b c")]))
    async with ExecutionContext(limits()) as ctx:
        assert "".join([str(c.content) async for c in m.astream("hi")]) == "abc"
    assert m.calls == 1
    snap = ctx.get_snapshot()
    assert snap.step_count == 1 and snap.cost_usd_accumulated == pytest.approx(PRICE)


# -- halts propagate unchanged ----------------------------------------------------------------------------


async def test_halt_from_ainvoke_is_the_kernels_exception_and_the_model_never_runs() -> None:
    m = model()
    async with ExecutionContext(limits(max_steps=2)) as ctx:
        await m.ainvoke("1")
        await m.ainvoke("2")
        with pytest.raises(ExecutionHalted) as info:
            await m.ainvoke("3")
    assert type(info.value) is ExecutionHalted and info.value.reason == "step_limit"
    assert m.calls == 2
    assert ctx.get_snapshot().step_count == 2


async def test_halt_from_astream_before_any_chunk() -> None:
    m = UsageStreamingChatModel(messages=iter([priced_message("a b c")] * 3))
    chunks: list[Any] = []
    handler = VeronicaAsyncCallbackHandler(ExecutionContext(limits(max_steps=1)))
    async for chunk in m.astream("hi", config={"callbacks": [handler]}):
        chunks.append(chunk)
    first = len(chunks)
    with pytest.raises(ExecutionHalted) as info:
        async for chunk in m.astream("hi", config={"callbacks": [handler]}):
            chunks.append(chunk)
    assert info.value.reason == "step_limit"
    assert m.calls == 1 and first >= 3 and len(chunks) == first  # nothing of the refused stream


async def test_halt_from_a_langgraph_async_graph() -> None:
    class State(TypedDict):
        n: int

    m = model()

    async def call_model(state: State) -> dict[str, int]:
        await m.ainvoke(f"turn {state['n']}")
        return {"n": state["n"] + 1}

    builder = StateGraph(State)
    builder.add_node("model", call_model)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", lambda s: END if s["n"] >= 10 else "model")
    graph = builder.compile()
    async with ExecutionContext(limits(max_steps=4)):
        with pytest.raises(ExecutionHalted) as info:
            await graph.ainvoke({"n": 0})
    assert info.value.reason == "step_limit"
    assert m.calls == 4


async def test_explicit_async_handler_cost_ceiling_with_text_llm() -> None:
    llm = FakeListLLM(responses=["x"] * 5)
    ctx = ExecutionContext(limits(max_cost_usd=0.25))
    handler = VeronicaAsyncCallbackHandler(ctx, cost_estimate_hint=0.1)
    assert await llm.ainvoke("a", config={"callbacks": [handler]}) == "x"
    assert await llm.ainvoke("b", config={"callbacks": [handler]}) == "x"
    with pytest.raises(ExecutionHalted) as info:
        await llm.ainvoke("c", config={"callbacks": [handler]})  # 0.2 committed + 0.1 > 0.25
    assert info.value.reason == "budget_exceeded"
    assert ctx.get_snapshot().step_count == 2


# -- other handlers still get their events, coroutines awaited ---------------------------------------------


class CountingAsync(AsyncCallbackHandler):
    def __init__(self) -> None:
        self.starts: list[UUID] = []
        self.errors = 0
        self.finished = 0

    async def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID, **kw: Any) -> None:
        await asyncio.sleep(0)  # a real await: the coroutine is suspended once
        self.starts.append(run_id)
        self.finished += 1

    async def on_llm_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> None:
        self.errors += 1


class CountingSync(BaseCallbackHandler):
    def __init__(self) -> None:
        self.starts = 0

    def on_chat_model_start(self, serialized: Any, messages: Any, **kw: Any) -> None:
        self.starts += 1


@pytest.mark.parametrize("explicit", [False, True])
async def test_other_handlers_are_still_awaited_when_the_run_halts(explicit: bool) -> None:
    other_async, other_sync = CountingAsync(), CountingSync()
    m = model()
    ctx = ExecutionContext(limits(max_steps=1))
    callbacks: list[Any] = [other_async, other_sync]
    if explicit:
        callbacks.insert(0, VeronicaAsyncCallbackHandler(ctx))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine ... was never awaited" fails the test
        async with ctx:
            await m.ainvoke("ok", config={"callbacks": callbacks})
            with pytest.raises(ExecutionHalted):
                await m.ainvoke("refused", config={"callbacks": callbacks})
            for _ in range(5):  # let the other handlers' tasks run to their end
                await asyncio.sleep(0)
        gc.collect()
    assert m.calls == 1
    assert len(other_async.starts) == 2 and other_async.finished == 2  # both runs, fully awaited
    assert other_sync.starts == 2
    assert ctx.get_snapshot().step_count == 1


class TextStarts(AsyncCallbackHandler):
    def __init__(self) -> None:
        self.starts = 0

    async def on_llm_start(self, serialized: Any, prompts: Any, **kw: Any) -> None:
        await asyncio.sleep(0)
        self.starts += 1


class SyncTextStarts(BaseCallbackHandler):
    def __init__(self) -> None:
        self.starts = 0

    def on_llm_start(self, serialized: Any, prompts: Any, **kw: Any) -> None:
        self.starts += 1


@pytest.mark.parametrize("explicit", [False, True])
async def test_text_llm_starts_still_reach_the_other_handlers(explicit: bool) -> None:
    # LangChain's on_llm_start sends the event to the inline handlers only when there is one: the
    # twin must not count as inline there, or no other handler would ever see a text LLM start.
    others: list[Any] = [TextStarts(), SyncTextStarts()]
    llm = FakeListLLM(responses=["x"] * 3)
    async with ExecutionContext(limits()) as ctx:
        callbacks = [*others, VeronicaAsyncCallbackHandler(ctx)] if explicit else others
        for _ in range(3):
            assert await llm.ainvoke("a", config={"callbacks": callbacks}) == "x"
    assert [h.starts for h in others] == [3, 3]
    assert ctx.get_snapshot().step_count == 3


async def test_a_refused_batch_gives_back_its_earlier_steps_and_awaits_the_others() -> None:
    # One generate call with two message lists: the first is admitted, the second refused, so
    # LangChain calls neither model and never ends the first run.
    other = CountingAsync()
    m = model()
    ctx = ExecutionContext(limits(max_steps=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        async with ctx:
            with pytest.raises(ExecutionHalted) as info:
                await m.agenerate([[HumanMessage("a")], [HumanMessage("b")]], callbacks=[other])
            for _ in range(5):
                await asyncio.sleep(0)
        gc.collect()
    assert info.value.reason == "step_limit"
    assert m.calls == 0 and len(other.starts) == 2 and other.finished == 2
    snap = ctx.get_snapshot()
    assert snap.step_count == 0 and snap.in_flight == 0 and snap.cost_usd_reserved == 0.0


async def test_both_handlers_attached_count_a_run_once() -> None:
    m = model()
    ctx = ExecutionContext(limits())
    callbacks: list[Any] = [VeronicaCallbackHandler(ctx), VeronicaAsyncCallbackHandler(ctx)]
    async with ctx:
        await m.ainvoke("hi", config={"callbacks": callbacks})
    assert m.calls == 1
    snap = ctx.get_snapshot()
    assert snap.step_count == 1 and snap.cost_usd_accumulated == pytest.approx(PRICE)


# -- an async budget parent is awaited, never called synchronously ----------------------------------------


class AsyncParent:
    def __init__(self, allow: int) -> None:
        self.allow = allow
        self.calls: list[str] = []

    def reserve(self, amount_usd: float) -> bool:
        self.calls.append("reserve")
        return True

    def settle(self, reserved_usd: float, actual_usd: float) -> None:
        self.calls.append("settle")

    async def areserve(self, amount_usd: float) -> bool:
        await asyncio.sleep(0)
        self.calls.append("areserve")
        self.allow -= 1
        return self.allow >= 0

    async def asettle(self, reserved_usd: float, actual_usd: float) -> None:
        await asyncio.sleep(0)
        self.calls.append(f"asettle:{actual_usd:.6f}")

    def retry_after_s(self) -> float | None:
        return 2.0


async def test_async_runs_await_the_parent_budget() -> None:
    parent = AsyncParent(allow=1)
    m = model()
    ctx = ExecutionContext(limits(), budget_parent=parent)
    async with ctx:
        await m.ainvoke("hi")
        with pytest.raises(ExecutionHalted) as info:
            await m.ainvoke("again")
    assert info.value.reason == "budget_exceeded" and info.value.retry_after_s == 2.0
    assert parent.calls == ["areserve", f"asettle:{PRICE:.6f}", "areserve"]
    assert m.calls == 1
