"""Parallel runs under a cost ceiling (the SDK's ``parallelization.py`` pattern: three runs in
``asyncio.gather``): what was sent is what is counted.

Each run's model is the SDK's real ``OpenAIChatCompletionsModel`` on an instrumented OpenAI client
pointed at the fake provider. The client prepares each request asynchronously before building it
(like ``AsyncAzureOpenAI`` fetching an Azure AD token): the test holds that step, so two runs are
admitted -- their worst case reserved -- and wait there while the third is refused at the ceiling.
When the halt propagates out of ``gather`` and ``asyncio.run`` cancels the two siblings, nothing was
sent: no request reached the server and no reservation is billed. When the siblings are let go
instead, exactly the two admitted requests are sent and billed at what the server reported."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted

from ...support.fake_provider import FakeProvider, cost_of

MODEL = "gpt-4o-mini"
SETTINGS = ModelSettings(max_tokens=500, include_usage=True)


class GatedClient(openai.AsyncOpenAI):
    """An OpenAI client whose per-request preparation waits for ``gate`` (an async credential
    refresh): the request is admitted and reserved, but not built or sent, until it opens."""

    def __init__(self, gate: asyncio.Event, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gate = gate
        self.waiting = 0

    async def _prepare_options(self, options: Any) -> Any:
        self.waiting += 1
        await self.gate.wait()
        return await super()._prepare_options(options)


@pytest.fixture
def server() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


@pytest.fixture(autouse=True)
def instrumented() -> Iterator[None]:
    assert set(veronica_mw.instrument("openai", "openai-agents")) >= {"openai", "openai-agents"}
    yield
    veronica_mw.uninstrument()


def _agent(name: str, client: openai.AsyncOpenAI) -> Agent[Any]:
    model = OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
    return Agent(name=name, instructions="Translate to Spanish.", model=model, model_settings=SETTINGS)


def _reservation(server: FakeProvider) -> float:
    """What one of these model calls reserves before it is sent (measured under a wide ceiling)."""

    async def main() -> float:
        async with openai.AsyncOpenAI(base_url=server.openai_url, api_key="t", max_retries=0) as client:
            with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0)) as ctx:
                await Runner.run(_agent("probe", client), "Hello")
        (node,) = ctx.graph.nodes()
        return node.reserved_usd

    reserved = asyncio.run(main())
    server.reset()
    assert reserved > 0
    return reserved


def _gathered(server: FakeProvider, ceiling: float, cancel: bool) -> tuple[ExecutionContext, ExecutionHalted]:
    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=ceiling, max_steps=20, max_retries_total=0))

    async def main() -> None:
        gate = asyncio.Event()
        async with GatedClient(gate, base_url=server.openai_url, api_key="t", max_retries=0) as client:
            runs = [Runner.run(_agent(f"translator{i}", client), "Hello") for i in range(3)]
            if cancel:  # the third run's halt leaves gather; asyncio.run cancels the siblings
                await asyncio.gather(*runs)
            else:
                tasks = [asyncio.ensure_future(run) for run in runs]
                # the third run is refused; the two admitted calls wait before building the request
                for _ in range(30_000):  # hang guard only
                    if ctx.aborted and client.waiting >= 2:
                        break
                    await asyncio.sleep(0.001)
                assert client.waiting == 2
                gate.set()
                outcomes = await asyncio.gather(*tasks, return_exceptions=True)
                raise next(o for o in outcomes if isinstance(o, BaseException))

    with ctx, pytest.raises(ExecutionHalted) as caught:
        asyncio.run(main())
    return ctx, caught.value


def test_cancelled_siblings_send_nothing_and_bill_no_reservation(server: FakeProvider) -> None:
    reserved = _reservation(server)
    ctx, halted = _gathered(server, ceiling=reserved * 2.5, cancel=True)
    assert halted.reason == "budget_exceeded"
    snap = ctx.get_snapshot()
    assert server.count() == 0
    assert snap.cost_usd_accumulated == 0.0 and snap.cost_usd_reserved == 0.0 and snap.in_flight == 0
    assert [n for n in ctx.graph.nodes() if n.cost_usd] == []
    assert snap.step_count == 0  # steps are what was sent


def test_admitted_siblings_still_send_exactly_their_requests(server: FakeProvider) -> None:
    reserved = _reservation(server)
    ctx, halted = _gathered(server, ceiling=reserved * 2.5, cancel=False)
    assert halted.reason == "budget_exceeded"
    snap = ctx.get_snapshot()
    assert server.count("/v1/chat/completions") == 2 == len(server.reported)
    assert snap.cost_usd_accumulated == pytest.approx(cost_of(server.reported))
    assert snap.cost_usd_reserved == 0.0 and snap.in_flight == 0
    assert sorted(n.status for n in ctx.graph.nodes() if n.cost_usd) == ["ok", "ok"]
