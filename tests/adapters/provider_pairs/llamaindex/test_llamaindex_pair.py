"""LlamaIndex's ``OpenAI`` LLM over the instrumented OpenAI SDK: the LlamaIndex handler's step and the
SDK request are one step (steps == requests the fake server received)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from llama_index.core.llms import ChatMessage
from llama_index.llms.openai import OpenAI as LlamaOpenAI

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters.llamaindex import VeronicaLlamaIndexHandler

from ....support.fake_provider import FakeProvider, cost_of

LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=4, max_retries_total=0)
MESSAGES = [ChatMessage(role="user", content="hello")]


@pytest.fixture
def llm(server: FakeProvider, sdks: None) -> Iterator[LlamaOpenAI]:
    with VeronicaLlamaIndexHandler():
        model = LlamaOpenAI(model="gpt-4o-mini", api_base=server.openai_url, api_key="test", max_retries=0)
        yield model
        model._get_client().close()  # LlamaIndex keeps its SDK clients: close them here


def test_sync_forms_are_one_step_each(llm: LlamaOpenAI, server: FakeProvider) -> None:
    with ExecutionContext(LIMITS) as ctx:
        llm.chat(MESSAGES)
        llm.complete("complete me")
        "".join(r.delta or "" for r in llm.stream_chat(MESSAGES))
        "".join(r.delta or "" for r in llm.stream_complete("stream me"))
        with pytest.raises(ExecutionHalted):
            llm.chat(MESSAGES)
    assert server.count() == 4 == ctx.get_snapshot().step_count


@pytest.mark.anyio
async def test_async_forms_are_one_step_each(llm: LlamaOpenAI, server: FakeProvider) -> None:
    async with ExecutionContext(LIMITS) as ctx:
        await llm.achat(MESSAGES)
        await llm.acomplete("complete me")
        stream = await llm.astream_chat(MESSAGES)
        async for _ in stream:
            pass
        await llm.achat(MESSAGES)
        with pytest.raises(ExecutionHalted):
            await llm.achat(MESSAGES)
    assert server.count() == 4 == ctx.get_snapshot().step_count
    await llm._get_aclient().close()


def test_costs_are_the_reported_usage(llm: LlamaOpenAI, server: FakeProvider) -> None:
    with ExecutionContext(LIMITS) as ctx:
        llm.chat(MESSAGES)
        llm.chat(MESSAGES)
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(cost_of(server.reported, "openai"))
