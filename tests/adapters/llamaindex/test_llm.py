"""Model calls: refused before the model runs in all eight forms, counted once, priced from usage."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

import pytest
from genai_prices import Usage, calc_price
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.llms.mock import MockLLM

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters.llamaindex import VeronicaLlamaIndexHandler

from .fakes import MODEL, UsageLLM

MESSAGES = [ChatMessage(role="user", content="hello")]
PRICE = float(calc_price(Usage(input_tokens=1000, output_tokens=500), model_ref=MODEL).total_price)


async def _drain(stream: Any) -> None:
    async for _ in stream:
        pass


# One call of each form, consuming streams; every form is one model invocation.
FORMS: dict[str, Callable[[Any], Any]] = {
    "chat": lambda llm: llm.chat(MESSAGES),
    "complete": lambda llm: llm.complete("hello"),
    "stream_chat": lambda llm: list(llm.stream_chat(MESSAGES)),
    "stream_complete": lambda llm: list(llm.stream_complete("hello")),
    "achat": lambda llm: asyncio.run(llm.achat(MESSAGES)),
    "acomplete": lambda llm: asyncio.run(llm.acomplete("hello")),
    "astream_chat": lambda llm: asyncio.run(_adrain(llm.astream_chat(MESSAGES))),
    "astream_complete": lambda llm: asyncio.run(_adrain(llm.astream_complete("hello"))),
}


async def _adrain(started: Any) -> None:
    await _drain(await started)


def _config(**limits: Any) -> ExecutionConfig:
    return ExecutionConfig(**{"max_cost_usd": 100.0, "max_steps": 100, "max_retries_total": 5, **limits})


@pytest.mark.parametrize("form", list(FORMS))
def test_loop_stops_at_max_steps_before_the_model_runs(form: str) -> None:
    llm = UsageLLM()
    ctx = ExecutionContext(_config(max_steps=3))
    done = 0
    with VeronicaLlamaIndexHandler(ctx), pytest.raises(ExecutionHalted) as halted:
        for _ in range(10):
            FORMS[form](llm)
            done += 1
    assert halted.value.reason == "step_limit"
    assert (done, llm.calls) == (3, 3)  # the 4th call never reached the model
    snap = ctx.get_snapshot()
    assert (snap.step_count, snap.in_flight) == (3, 0)
    # chat -> complete (and achat -> chat -> complete) is one call, not two or three
    assert [node.status for node in ctx.graph.nodes()] == ["ok", "ok", "ok"]


@pytest.mark.parametrize("form", list(FORMS))
def test_usage_is_priced_from_raw_usage(form: str) -> None:
    llm = UsageLLM()
    ctx = ExecutionContext(_config())
    with VeronicaLlamaIndexHandler(ctx):
        FORMS[form](llm)
        FORMS[form](llm)
    nodes = ctx.graph.nodes()
    assert [(n.model, n.tokens_in, n.tokens_out) for n in nodes] == [(MODEL, 1000, 500)] * 2
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(2 * PRICE)


@pytest.mark.parametrize("shape", ["openai-dict", "anthropic-object", "additional-kwargs"])
def test_usage_shapes_and_model_name_from_metadata(shape: str) -> None:
    llm = UsageLLM(shape=shape)  # without a model in raw, LLMMetadata.model_name names it
    ctx = ExecutionContext(_config())
    with VeronicaLlamaIndexHandler(ctx):
        llm.chat(MESSAGES)
        list(llm.stream_complete("hello"))
    assert [(n.model, n.tokens_in, n.tokens_out) for n in ctx.graph.nodes()] == [(MODEL, 1000, 500)] * 2
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(2 * PRICE)


def test_budget_halts_after_the_call_that_crossed_it() -> None:
    llm = UsageLLM()
    ctx = ExecutionContext(_config(max_cost_usd=2.5 * PRICE))
    with VeronicaLlamaIndexHandler(ctx), pytest.raises(ExecutionHalted) as halted:
        for _ in range(10):
            llm.chat(MESSAGES)
    assert halted.value.reason == "budget_exceeded"
    assert llm.calls == 3  # third call took the total to 3 * PRICE > 2.5 * PRICE; the fourth was refused
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(3 * PRICE)


def test_cost_hint_is_reserved_then_replaced_by_the_real_price() -> None:
    llm = UsageLLM()
    ctx = ExecutionContext(_config(max_cost_usd=0.015))
    with VeronicaLlamaIndexHandler(ctx, cost_estimate_hint=0.01), pytest.raises(ExecutionHalted) as halted:
        for _ in range(100):
            llm.chat(MESSAGES)
    # Each call needs committed + 0.01 <= 0.015 to start and then costs PRICE, not the 0.01 hint.
    assert halted.value.reason == "budget_exceeded"
    assert llm.calls == math.floor(0.005 / PRICE) + 1
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(llm.calls * PRICE)


def test_open_stream_keeps_its_hint_reserved() -> None:
    llm = UsageLLM()
    ctx = ExecutionContext(_config(max_cost_usd=0.015))
    with VeronicaLlamaIndexHandler(ctx, cost_estimate_hint=0.01):
        stream = llm.stream_chat(MESSAGES)  # begun, not consumed: 0.01 stays reserved
        with pytest.raises(ExecutionHalted):
            llm.chat(MESSAGES)
        assert list(stream)[-1].message.content == "ok"
    assert llm.calls == 1


def test_mock_llm_chat_and_complete_loops() -> None:
    prompts: list[str] = []

    def to_prompt(messages: Any) -> str:  # MockLLM.chat renders the messages once per real call
        prompts.append("chat")
        return "hello"

    llm = MockLLM(messages_to_prompt=to_prompt)
    ctx = ExecutionContext(_config(max_steps=4))
    with VeronicaLlamaIndexHandler(ctx), pytest.raises(ExecutionHalted):
        while True:
            llm.chat(MESSAGES)
            llm.complete("hello")
    assert len(prompts) == 2  # chat, complete, chat, complete, then the third chat was refused
    assert [n.name for n in ctx.graph.nodes()] == ["MockLLM.chat", "MockLLM.complete"] * 2


@pytest.mark.anyio
async def test_mock_llm_async_and_streaming_loop() -> None:
    prompts: list[str] = []

    def to_prompt(messages: Any) -> str:
        prompts.append("chat")
        return "hello"

    llm = MockLLM(messages_to_prompt=to_prompt)
    ctx = ExecutionContext(_config(max_steps=5))
    with VeronicaLlamaIndexHandler(ctx), pytest.raises(ExecutionHalted):
        while True:
            await llm.achat(MESSAGES)
            await _drain(await llm.astream_chat(MESSAGES))
            list(llm.stream_chat(MESSAGES))
    assert len(prompts) == 5
    assert ctx.get_snapshot().step_count == 5


def test_model_error_draws_a_retry_and_propagates_unchanged() -> None:
    llm = UsageLLM(fail=True)
    ctx = ExecutionContext(_config(max_retries_total=1))
    with VeronicaLlamaIndexHandler(ctx):
        with pytest.raises(ValueError, match="model backend error"):
            llm.chat(MESSAGES)
        assert ctx.get_snapshot().retries_used == 1
        with pytest.raises(ValueError):
            llm.chat(MESSAGES)  # second failure: the retry budget is spent, the context halts
        with pytest.raises(ExecutionHalted) as halted:
            llm.chat(MESSAGES)
    assert halted.value.reason == "retry_limit"
    assert llm.calls == 2


def test_stream_closed_early_is_settled_not_left_open() -> None:
    llm = UsageLLM()
    ctx = ExecutionContext(_config())
    with VeronicaLlamaIndexHandler(ctx):
        stream = llm.stream_chat(MESSAGES)
        next(stream)
        stream.close()
    snap = ctx.get_snapshot()
    assert (snap.step_count, snap.in_flight, snap.retries_used) == (1, 0, 0)


def test_without_any_context_calls_run_uncontained() -> None:
    llm = UsageLLM()
    handler = VeronicaLlamaIndexHandler()
    with handler:
        for _ in range(3):
            llm.chat(MESSAGES)
        assert handler.resolve_context() is None
    assert llm.calls == 3


def test_owned_context_from_config_and_reset() -> None:
    llm = UsageLLM()
    handler = VeronicaLlamaIndexHandler(config=_config(max_steps=2))
    with handler:
        llm.chat(MESSAGES)
        llm.chat(MESSAGES)
        with pytest.raises(ExecutionHalted):
            llm.chat(MESSAGES)
        first = handler.owned_context
        handler.reset()  # a new run with the same limits
        llm.chat(MESSAGES)
    assert first is not None and first.get_snapshot().step_count == 2
    assert handler.owned_context is not first
    assert handler.owned_context is not None and handler.owned_context.get_snapshot().step_count == 1
    assert llm.calls == 3


def test_current_context_is_used_when_none_is_given() -> None:
    llm = UsageLLM()
    outer = ExecutionContext(_config(max_steps=1))
    with VeronicaLlamaIndexHandler(config=_config()):  # the current context wins over the config
        with outer:
            llm.chat(MESSAGES)
            with pytest.raises(ExecutionHalted):
                llm.chat(MESSAGES)
    assert llm.calls == 1
