"""LangChain ``ChatOpenAI`` / ``ChatAnthropic`` over the instrumented SDKs: the LangChain handler and
the provider instrumentation see the same model call, which is one step (steps == requests the fake
server received), refused before anything is sent, priced once."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_anthropic import ChatAnthropic
from langchain_core.language_models import BaseChatModel
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

import veronica_mw.adapters.langchain  # noqa: F401  (zero-config: runs in a context are contained)
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted

from ....support.fake_provider import FakeProvider, cost_of

KEY = SecretStr("test")
LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=4, max_retries_total=0)


def _models(server: FakeProvider) -> list[tuple[BaseChatModel, str]]:
    return [
        (
            ChatOpenAI(
                model="gpt-4o-mini",
                base_url=server.openai_url,
                api_key=KEY,
                max_retries=0,
                stream_usage=True,
            ),
            "openai",
        ),
        (
            ChatAnthropic(  # type: ignore[call-arg]  # model is an alias of model_name
                model="claude-haiku-4-5", base_url=server.anthropic_url, api_key=KEY, max_retries=0
            ),
            "anthropic",
        ),
    ]


@pytest.mark.parametrize("which", [0, 1], ids=["ChatOpenAI", "ChatAnthropic"])
def test_sync_calls_are_one_step_each(server: FakeProvider, sdks: None, which: int) -> None:
    model, provider = _models(server)[which]
    with ExecutionContext(LIMITS) as ctx:
        model.invoke("hello")
        model.batch(["one", "two"])
        "".join(str(chunk.content) for chunk in model.stream("stream me"))
        with pytest.raises(ExecutionHalted):
            model.invoke("refused")
    snap = ctx.get_snapshot()
    assert server.count() == 4 == snap.step_count
    assert snap.cost_usd_accumulated == pytest.approx(cost_of(server.reported, provider), rel=1e-6)


@pytest.mark.parametrize("which", [0, 1], ids=["ChatOpenAI", "ChatAnthropic"])
@pytest.mark.anyio
async def test_async_calls_are_one_step_each(server: FakeProvider, sdks: None, which: int) -> None:
    model, provider = _models(server)[which]
    async with ExecutionContext(LIMITS) as ctx:
        await model.ainvoke("hello")
        await model.abatch(["one", "two"])
        [chunk async for chunk in model.astream("stream me")]
        with pytest.raises(ExecutionHalted):
            await model.ainvoke("refused")
    assert server.count() == 4 == ctx.get_snapshot().step_count


def test_the_run_step_is_reserved_at_the_requests_worst_case(server: FakeProvider, sdks: None) -> None:
    model = ChatOpenAI(model="gpt-4o-mini", base_url=server.openai_url, api_key=KEY, max_retries=0)
    capped: Any = model.bind(max_tokens=100_000)  # ~$0.06 worst case at gpt-4o-mini prices
    with ExecutionContext(ExecutionConfig(max_cost_usd=0.05, max_steps=5, max_retries_total=0)) as ctx:
        with pytest.raises(ExecutionHalted, match="budget_exceeded"):
            capped.invoke("too expensive")
    assert server.count() == 0 and ctx.get_snapshot().step_count == 0


def test_agent_middleware_steps_are_adopted(server: FakeProvider, sdks: None) -> None:
    from langchain.agents import create_agent

    from veronica_mw.adapters.langchain import VeronicaAgentMiddleware

    model = ChatOpenAI(model="gpt-4o-mini", base_url=server.openai_url, api_key=KEY, max_retries=0)
    agent = create_agent(model=model, tools=[], middleware=[VeronicaAgentMiddleware()])
    with ExecutionContext(LIMITS) as ctx:
        agent.invoke({"messages": [{"role": "user", "content": "hi"}]})
        agent.invoke({"messages": [{"role": "user", "content": "again"}]})
    assert server.count() == 2 == ctx.get_snapshot().step_count


def test_a_stream_without_usage_is_charged_what_the_sdk_layer_saw(server: FakeProvider, sdks: None) -> None:
    model = ChatOpenAI(model="gpt-4o-mini", base_url=server.openai_url, api_key=KEY, max_retries=0)
    with ExecutionContext(LIMITS) as ctx:
        text = "".join(str(chunk.content) for chunk in model.stream("stream me"))
    (node,) = ctx.graph.nodes()
    # LangChain got no usage; the OpenAI layer underneath estimated it from the text it carried.
    assert node.tokens_out == -(-len(text) // 4) and 0 < node.cost_usd < node.reserved_usd
    assert server.count() == 1
