"""LlamaIndex LLMs whose requests no provider instrumentation sees (a framework-side HTTP client,
an SDK veronica-mw does not patch): the handler reserves each call's worst case -- the prompt
estimated, the LLM's ``max_tokens`` or the configured default, priced for its ``model`` -- so a
ceiling below it refuses the call before the model runs, and a named model that cannot be priced
is refused up front (``unpriced``)."""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen, LLMMetadata
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, HaltReason
from veronica_mw.adapters._provider_estimate import worst_case
from veronica_mw.adapters.llamaindex import VeronicaLlamaIndexHandler


class HostedLLM(CustomLLM):
    """Shaped like LlamaIndex's hosted-model LLMs (OpenAI, OpenAILike for Groq): ``model`` and
    ``max_tokens`` fields, reported in its metadata (what the callback payload carries);
    ``calls`` counts the requests it would have sent."""

    model: str = "gpt-4o-mini"
    max_tokens: int | None = None
    calls: int = 0

    @property
    def metadata(self) -> LLMMetadata:
        # as LlamaIndex's OpenAI LLM reports it: num_output is max_tokens, -1 when unset
        return LLMMetadata(model_name=self.model, num_output=self.max_tokens or -1)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.calls += 1
        usage = {"prompt_tokens": 12, "completion_tokens": 3}
        return CompletionResponse(text="Paris", raw={"model": self.model, "usage": usage})

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        raise NotImplementedError


def _limits(cost: float) -> ExecutionConfig:
    return ExecutionConfig(max_cost_usd=cost, max_steps=10, max_retries_total=0)


PROMPT = "What is the capital of France?"


def test_the_worst_case_is_reserved_before_the_call() -> None:
    llm = HostedLLM(max_tokens=300)
    with ExecutionContext(_limits(1.0)) as ctx, VeronicaLlamaIndexHandler(ctx):
        llm.complete(PROMPT)
    [node] = ctx.graph.nodes()
    expected = worst_case("gpt-4o-mini", None, -(-len(PROMPT) // 4), 300)
    assert llm.calls == 1 and node.reserved_usd == pytest.approx(expected)
    assert node.cost_usd == pytest.approx(worst_case("gpt-4o-mini", None, 12, 3))


def test_a_ceiling_below_the_worst_case_refuses_before_the_model_runs() -> None:
    worst = worst_case("gpt-4o-mini", None, 10, 4096)
    assert worst is not None
    llm = HostedLLM()
    with ExecutionContext(_limits(worst / 4)) as ctx, VeronicaLlamaIndexHandler(ctx):
        with pytest.raises(ExecutionHalted) as caught:
            llm.complete(PROMPT)
    assert caught.value.reason == HaltReason.BUDGET_EXCEEDED and llm.calls == 0


def test_an_unpriced_model_is_refused_up_front() -> None:
    llm = HostedLLM(model="in-house-model-7")
    with ExecutionContext(_limits(1.0)) as ctx, VeronicaLlamaIndexHandler(ctx):
        with pytest.raises(ExecutionHalted) as caught:
            llm.complete(PROMPT)
    assert caught.value.reason == "unpriced" and "in-house-model-7" in caught.value.detail
    assert llm.calls == 0 and ctx.get_snapshot().step_count == 0


def test_a_cost_hint_replaces_the_estimate() -> None:
    llm = HostedLLM(model="in-house-model-7")
    with ExecutionContext(_limits(1.0)) as ctx, VeronicaLlamaIndexHandler(ctx, cost_estimate_hint=0.01):
        llm.complete(PROMPT)
    [node] = ctx.graph.nodes()
    assert llm.calls == 1 and node.reserved_usd == 0.01
