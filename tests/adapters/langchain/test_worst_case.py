"""LangChain chat models whose requests no provider instrumentation sees (an SDK veronica-mw does
not patch, a model's own HTTP client): the callback handler reserves each run's worst case -- the
prompt estimated, the model's ``max_tokens`` or the configured default, priced for its model -- so a
ceiling below it refuses the run before the model is called; a named unpriced model is refused up
front (``unpriced``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, HaltReason
from veronica_mw.adapters._provider_estimate import worst_case
from veronica_mw.adapters.langchain import VeronicaAsyncCallbackHandler, VeronicaCallbackHandler

PROMPT = "What is the capital of France?"


class HostedChat(GenericFakeChatModel):
    """LangChain's fake chat model, named and limited like a hosted one (``ChatGroq``,
    ``ChatOpenAI``): ``model_name`` and ``max_tokens`` are in its LangSmith params (the run
    metadata's ``ls_model_name``, ``ls_max_tokens``)."""

    model_name: str = "gpt-4o-mini"
    max_tokens: int | None = None
    calls: int = 0

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = "openai"
        params["ls_model_name"] = self.model_name
        if self.max_tokens is not None:
            params["ls_max_tokens"] = self.max_tokens  # as ChatOpenAI, ChatGroq report it
        return params

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return super()._generate(*args, **kwargs)


def chat(**fields: Any) -> HostedChat:
    return HostedChat(messages=iter([AIMessage(content="Paris")] * 3), **fields)


def _limits(cost: float) -> ExecutionConfig:
    return ExecutionConfig(max_cost_usd=cost, max_steps=10, max_retries_total=0)


@pytest.fixture(params=["sync", "async"])
def handler_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    yield request.param


def invoke(model: HostedChat, ctx: ExecutionContext, kind: str) -> None:
    if kind == "sync":
        model.invoke(PROMPT, config={"callbacks": [VeronicaCallbackHandler(ctx)]})
    else:
        asyncio.run(model.ainvoke(PROMPT, config={"callbacks": [VeronicaAsyncCallbackHandler(ctx)]}))


def test_the_worst_case_is_reserved_before_the_run(handler_kind: str) -> None:
    model = chat(max_tokens=300)
    with ExecutionContext(_limits(1.0)) as ctx:
        invoke(model, ctx, handler_kind)
    [node] = ctx.graph.nodes()
    low, high = worst_case("gpt-4o-mini", "openai", 1, 300), worst_case("gpt-4o-mini", "openai", 60, 300)
    assert model.calls == 1 and low is not None and high is not None
    assert low < node.reserved_usd < high


def test_a_ceiling_below_the_worst_case_refuses_before_the_model_runs(handler_kind: str) -> None:
    worst = worst_case("gpt-4o-mini", "openai", 10, 4096)
    assert worst is not None
    model = chat()
    with ExecutionContext(_limits(worst / 4)) as ctx, pytest.raises(ExecutionHalted) as caught:
        invoke(model, ctx, handler_kind)
    assert caught.value.reason == HaltReason.BUDGET_EXCEEDED and model.calls == 0


def test_an_unpriced_model_is_refused_up_front(handler_kind: str) -> None:
    model = chat(model_name="in-house-model-7")
    with ExecutionContext(_limits(1.0)) as ctx, pytest.raises(ExecutionHalted) as caught:
        invoke(model, ctx, handler_kind)
    assert caught.value.reason == "unpriced" and "in-house-model-7" in caught.value.detail
    assert model.calls == 0 and ctx.get_snapshot().step_count == 0
