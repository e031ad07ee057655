"""An agent on the SDK's real OpenAI models (``OpenAIChatCompletionsModel``, ``OpenAIResponsesModel``)
with the OpenAI SDK instrumented too: one step per request the (fake) provider server received.

The request is sent from the run's task, underneath the model call our ``on_llm_start`` began; the
provider instrumentation adopts that step instead of counting the request again."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from agents import Agent, Model, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner

import veronica_mw
from veronica_mw import ExecutionContext, ExecutionHalted
from veronica_mw.adapters.openai_agents import VeronicaRunHooks

from ...support.fake_provider import FakeProvider, cost_of
from .fakes import Counter, ping_tool
from .test_hooks import MODES, limits

MODEL = "gpt-4o-mini"


@pytest.fixture
def server() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


@pytest.fixture(autouse=True)
def instrumented() -> Iterator[None]:
    assert set(veronica_mw.instrument("openai", "openai-agents")) >= {"openai", "openai-agents"}
    yield
    veronica_mw.uninstrument()


def model(kind: str, client: openai.AsyncOpenAI) -> Model:
    if kind == "chat":
        return OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
    return OpenAIResponsesModel(model=MODEL, openai_client=client)


def run_once(mode: str, kind: str, server: FakeProvider, *, usage: bool = True, **kwargs: Any) -> None:
    """One run of an agent whose model answers with text (one request), on a client of its own
    that is closed on the event loop that used it (``run_sync`` brings a loop of its own)."""
    client = openai.AsyncOpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
    # include_usage: a streamed chat completion reports usage only when asked (like the real API).
    settings = ModelSettings(include_usage=True) if usage else ModelSettings()
    agent = Agent(
        name="assistant", model=model(kind, client), model_settings=settings, tools=[ping_tool(Counter())]
    )
    if mode == "run_sync":
        try:
            Runner.run_sync(agent, "hello", **kwargs)
        finally:
            loop = asyncio.get_event_loop_policy().get_event_loop()
            loop.run_until_complete(client.close())
            loop.close()
        return

    async def main() -> None:
        try:
            if mode == "run":
                await Runner.run(agent, "hello", **kwargs)
            else:
                streamed = Runner.run_streamed(agent, "hello", **kwargs)
                async for _ in streamed.stream_events():
                    pass
        finally:
            await client.close()

    asyncio.run(main())


def run_until_halted(mode: str, kind: str, server: FakeProvider, *, usage: bool = True, **kwargs: Any) -> int:
    """Run one-request agents until the context refuses one; return how many ran."""
    for runs in range(10):
        try:
            run_once(mode, kind, server, usage=usage, **kwargs)
        except ExecutionHalted as halted:
            assert halted.reason == "step_limit"
            return runs
    raise AssertionError("never halted")


@pytest.mark.parametrize("kind", ["chat", "responses"])
@pytest.mark.parametrize("mode", MODES)
def test_instrumented_runs_count_one_step_per_request(mode: str, kind: str, server: FakeProvider) -> None:
    with ExecutionContext(limits(3)) as ctx:
        assert run_until_halted(mode, kind, server) == 3
    snap = ctx.get_snapshot()
    assert server.count() == 3 == snap.step_count  # the 4th model call was refused before sending
    assert snap.in_flight == 0
    assert snap.cost_usd_accumulated == pytest.approx(cost_of(server.reported, "openai"), rel=1e-9)
    assert [n.kind for n in ctx.graph.nodes()] == ["llm"] * 3


@pytest.mark.parametrize("kind", ["chat", "responses"])
def test_explicit_hooks_count_one_step_per_request(kind: str, server: FakeProvider) -> None:
    ctx = ExecutionContext(limits(2))
    assert run_until_halted("run", kind, server, hooks=VeronicaRunHooks(ctx)) == 2
    assert server.count() == 2 == ctx.get_snapshot().step_count


def test_a_stream_without_usage_keeps_its_reservation(server: FakeProvider) -> None:
    with ExecutionContext(limits(2)) as ctx:
        assert run_until_halted("streamed", "chat", server, usage=False) == 2
    nodes = ctx.graph.nodes()
    assert server.count() == 2 and server.reported == []  # no usage was reported
    assert all(n.cost_usd == n.reserved_usd > 0 for n in nodes)  # never priced at $0


def test_a_request_outside_any_model_call_is_its_own_step(server: FakeProvider) -> None:
    # A tool that calls the OpenAI SDK itself: its request is a step of its own, next to the tool's.
    client = openai.AsyncOpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
    counter = Counter()

    async def main() -> None:
        from agents import function_tool

        from .fakes import ToolLoopModel

        @function_tool
        async def summarize() -> str:
            """Summarize with a second model."""
            done = await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "x"}]
            )
            return done.choices[0].message.content or ""

        agent = Agent(name="a", model=ToolLoopModel(counter, tool="summarize"), tools=[summarize])
        with ExecutionContext(limits(6)) as ctx:
            with pytest.raises(ExecutionHalted):
                await Runner.run(agent, "go", max_turns=100)
        # model, tool, request, model, tool, request; the next model call is refused.
        assert [n.kind for n in ctx.graph.nodes()] == ["llm", "tool", "llm"] * 2
        await client.close()

    asyncio.run(main())
    assert server.count() == 2 and counter.model_calls == 2
