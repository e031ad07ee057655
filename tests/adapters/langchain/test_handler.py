"""VeronicaCallbackHandler against real LangChain runnables and fake models: step limits, cost, streaming."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.runnables import Runnable

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters import langchain as vlc
from veronica_mw.adapters.langchain import VeronicaCallbackHandler

from .fakes import MODEL, PRICE, CountingChatModel, priced_message


class UsageStreamingChatModel(GenericFakeChatModel):
    """Streams word chunks and reports usage on the last one, as providers do with stream usage."""

    calls: int = 0

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        self.calls += 1
        message = next(self.messages)
        assert isinstance(message, AIMessage) and isinstance(message.content, str)
        words = message.content.split(" ")
        for i, word in enumerate(words):
            last = i == len(words) - 1
            chunk = ChatGenerationChunk(
                message=AIMessageChunk(
                    content=word,
                    usage_metadata=message.usage_metadata if last else None,
                    response_metadata=message.response_metadata if last else {},
                )
            )
            if run_manager:
                run_manager.on_llm_new_token(word, chunk=chunk)
            yield chunk


def model(**kwargs: Any) -> CountingChatModel:
    return CountingChatModel(responses=[priced_message()], **kwargs)


def ten_call_chain(m: CountingChatModel) -> Runnable[Any, Any]:
    chain: Runnable[Any, Any] = m | StrOutputParser()
    for _ in range(9):
        chain = chain | m | StrOutputParser()
    return chain


def limits(**kwargs: Any) -> ExecutionConfig:
    base: dict[str, Any] = {"max_cost_usd": 100.0, "max_steps": 100, "max_retries_total": 0}
    return ExecutionConfig(**{**base, **kwargs})


# -- step limit: sync, async, streaming --------------------------------------------------------------


def test_step_limit_explicit_handler_invoke() -> None:
    m = model()
    ctx = ExecutionContext(limits(max_steps=3))
    with pytest.raises(ExecutionHalted) as info:
        ten_call_chain(m).invoke("hi", config={"callbacks": [VeronicaCallbackHandler(ctx)]})
    assert info.value.reason == "step_limit"
    assert m.calls == 3
    assert ctx.get_snapshot().step_count == 3


@pytest.mark.anyio
async def test_step_limit_ainvoke_zero_config() -> None:
    m = model()
    ctx = ExecutionContext(limits(max_steps=3))
    async with ctx:
        with pytest.raises(ExecutionHalted) as info:
            await ten_call_chain(m).ainvoke("hi")
    assert info.value.reason == "step_limit"
    assert m.calls == 3


@pytest.mark.anyio
async def test_step_limit_astream() -> None:
    m = model()
    ctx = ExecutionContext(limits(max_steps=3))
    chunks: list[Any] = []
    with pytest.raises(ExecutionHalted) as info:
        async for chunk in ten_call_chain(m).astream(
            "hi", config={"callbacks": [VeronicaCallbackHandler(ctx)]}
        ):
            chunks.append(chunk)
    assert info.value.reason == "step_limit"
    assert m.calls == 3
    assert chunks == []  # the chain's last step never ran


def test_concurrent_async_calls_admit_exactly_max_steps() -> None:
    m = model()
    ctx = ExecutionContext(limits(max_steps=4))

    async def main() -> list[Any]:
        async with ctx:
            return await asyncio.gather(*(m.ainvoke("hi") for _ in range(10)), return_exceptions=True)

    results = asyncio.run(main())
    assert m.calls == 4
    assert sum(isinstance(r, ExecutionHalted) for r in results) == 6
    assert ctx.get_snapshot().step_count == 4


def test_batch_counts_each_input() -> None:
    m = model()
    ctx = ExecutionContext(limits())
    with ctx:
        m.batch(["a", "b", "c"])
    assert m.calls == 3
    assert ctx.get_snapshot().step_count == 3


def test_text_llm_counts_through_on_llm_start() -> None:
    llm = FakeListLLM(responses=["one", "two"])
    ctx = ExecutionContext(limits(max_steps=2))
    with ctx:
        assert llm.invoke("a") == "one"
        assert llm.invoke("b") == "two"
        with pytest.raises(ExecutionHalted):
            llm.invoke("c")
    assert llm.i == 0  # cycled through both responses exactly once, third call never ran
    assert ctx.get_snapshot().step_count == 2


# -- cost ---------------------------------------------------------------------------------------------


def test_usage_is_priced_through_the_kernel() -> None:
    ctx = ExecutionContext(limits())
    model().invoke("hi", config={"callbacks": [VeronicaCallbackHandler(ctx)]})
    snap = ctx.get_snapshot()
    assert snap.cost_usd_accumulated == pytest.approx(PRICE)
    [node] = ctx.graph.nodes()
    assert (node.kind, node.tokens_in, node.tokens_out, node.model) == ("llm", 1000, 500, MODEL)
    assert isinstance(ctx.get_partial_result(), AIMessage)


def test_cost_hint_stops_the_call_that_would_cross_the_ceiling() -> None:
    m = model()
    ctx = ExecutionContext(limits(max_cost_usd=2.5 * PRICE))
    handler = VeronicaCallbackHandler(ctx, cost_estimate_hint=PRICE)
    with pytest.raises(ExecutionHalted) as info:
        for _ in range(5):
            m.invoke("hi", config={"callbacks": [handler]})
    assert info.value.reason == "budget_exceeded"
    assert m.calls == 2
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(2 * PRICE)


def test_cost_hint_from_run_metadata() -> None:
    m = model()
    hinted = m.with_config(metadata={vlc.COST_HINT_METADATA_KEY: PRICE})
    ctx = ExecutionContext(limits(max_cost_usd=1.5 * PRICE))
    with ctx, pytest.raises(ExecutionHalted) as info:
        for _ in range(5):
            hinted.invoke("hi")
    assert info.value.reason == "budget_exceeded"
    assert m.calls == 1


def test_without_hint_the_first_call_after_crossing_is_stopped() -> None:
    m = model()
    ctx = ExecutionContext(limits(max_cost_usd=1.5 * PRICE))
    with ctx, pytest.raises(ExecutionHalted) as info:
        for _ in range(5):
            m.invoke("hi")
    assert info.value.reason == "budget_exceeded"
    assert m.calls == 2  # the second call crossed the ceiling; the third was refused
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(2 * PRICE)


def streaming_model() -> UsageStreamingChatModel:
    return UsageStreamingChatModel(messages=iter([priced_message("a b c") for _ in range(5)]))


def test_stream_is_counted_and_priced() -> None:
    m = streaming_model()
    ctx = ExecutionContext(limits(max_steps=2))
    with ctx:
        assert "".join(str(c.content) for c in m.stream("hi")) == "abc"
        assert "".join(str(c.content) for c in m.stream("hi")) == "abc"
        with pytest.raises(ExecutionHalted) as info:
            list(m.stream("hi"))
    assert info.value.reason == "step_limit"
    assert m.calls == 2
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(2 * PRICE)


@pytest.mark.anyio
async def test_astream_is_counted_and_priced() -> None:
    m = streaming_model()
    ctx = ExecutionContext(limits(max_cost_usd=1.5 * PRICE))
    async with ctx:
        for _ in range(2):
            assert "".join([str(c.content) async for c in m.astream("hi")]) == "abc"
        with pytest.raises(ExecutionHalted) as info:
            async for _ in m.astream("hi"):
                pass
    assert info.value.reason == "budget_exceeded"
    assert m.calls == 2
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(2 * PRICE)


def test_generic_fake_stream_without_usage_is_still_a_step() -> None:
    m = GenericFakeChatModel(messages=iter(["one two", "three"]))
    ctx = ExecutionContext(limits(max_steps=1))
    with ctx:
        assert "".join(str(c.content) for c in m.stream("hi")) == "one two"
        with pytest.raises(ExecutionHalted):
            list(m.stream("hi"))
    snap = ctx.get_snapshot()
    assert (snap.step_count, snap.cost_usd_accumulated) == (1, 0.0)
