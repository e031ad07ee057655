"""LiteLLM ``completion``/``acompletion`` (plain and streaming) through the real library against the
fake server: with the OpenAI SDK underneath (one step adopted by both layers: steps == requests)
and with LiteLLM's own HTTP client (Anthropic models)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import litellm
import pytest

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted

from ...support.fake_provider import FakeProvider, cost_of

# LiteLLM's own use of pydantic warns (ReadOnly TypedDicts, deprecated instance attributes): not ours,
# and under "error" the warnings would become exceptions inside LiteLLM.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Item.*using the `ReadOnly` qualifier:UserWarning"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211"),
]

MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "Say hello through LiteLLM."}]
LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=2, max_retries_total=0)
# (model, the fake server's base url attribute, the path LiteLLM posts to, genai-prices provider)
ROUTES = [
    ("openai/gpt-4o-mini", "openai_url", "/v1/chat/completions", "openai"),
    ("anthropic/claude-haiku-4-5", "anthropic_url", "/v1/messages", "anthropic"),
]
IDS = ["openai-sdk", "anthropic-http"]


def _args(server: FakeProvider, model: str, base: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "messages": MESSAGES,
        "api_base": getattr(server, base),
        "api_key": "test",
        **extra,
    }


def plain(server: FakeProvider, model: str, base: str) -> Any:
    return litellm.completion(**_args(server, model, base))


def streamed(server: FakeProvider, model: str, base: str) -> Any:
    stream = litellm.completion(
        **_args(server, model, base, stream=True, stream_options={"include_usage": True})
    )
    return [chunk for chunk in stream]


async def aplain(server: FakeProvider, model: str, base: str) -> Any:
    return await litellm.acompletion(**_args(server, model, base))


async def astreamed(server: FakeProvider, model: str, base: str) -> Any:
    stream = await litellm.acompletion(
        **_args(server, model, base, stream=True, stream_options={"include_usage": True})
    )
    return [chunk async for chunk in stream]


SYNC: list[Callable[[FakeProvider, str, str], Any]] = [plain, streamed]
ASYNC: list[Callable[[FakeProvider, str, str], Awaitable[Any]]] = [aplain, astreamed]


def _check(ctx: ExecutionContext, server: FakeProvider, path: str, provider: str) -> None:
    snap = ctx.get_snapshot()
    assert server.count(path) == 2 == server.count() and snap.step_count == 2  # one step per request
    assert snap.abort_reason == "step_limit" and snap.cost_usd_reserved == 0.0
    assert [n.name for n in ctx.graph.nodes()] == ["litellm.completion"] * 2
    assert snap.cost_usd_accumulated == pytest.approx(cost_of(server.reported, provider))


@pytest.mark.parametrize("shape", SYNC, ids=["completion", "stream"])
@pytest.mark.parametrize(("model", "base", "path", "provider"), ROUTES, ids=IDS)
def test_sync(
    server: FakeProvider, instrumented: None, shape: Any, model: str, base: str, path: str, provider: str
) -> None:
    with ExecutionContext(LIMITS) as ctx:
        shape(server, model, base)
        shape(server, model, base)
        with pytest.raises(ExecutionHalted):
            shape(server, model, base)
    _check(ctx, server, path, provider)


@pytest.mark.parametrize("shape", ASYNC, ids=["acompletion", "astream"])
@pytest.mark.parametrize(("model", "base", "path", "provider"), ROUTES, ids=IDS)
@pytest.mark.anyio
async def test_async(
    server: FakeProvider, instrumented: None, shape: Any, model: str, base: str, path: str, provider: str
) -> None:
    async with ExecutionContext(LIMITS) as ctx:
        await shape(server, model, base)
        await shape(server, model, base)
        with pytest.raises(ExecutionHalted):
            await shape(server, model, base)
    _check(ctx, server, path, provider)


def test_litellm_alone_counts_each_call_once(server: FakeProvider) -> None:
    veronica_mw.instrument("litellm")
    try:
        with ExecutionContext(LIMITS) as ctx:
            plain(server, "openai/gpt-4o-mini", "openai_url")
    finally:
        veronica_mw.uninstrument()
    assert server.count() == 1 and ctx.get_snapshot().step_count == 1


def test_a_halt_below_litellm_is_not_turned_into_a_litellm_error(
    server: FakeProvider, instrumented: None
) -> None:
    server.fail_next(3, 429)
    with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0)) as ctx:
        with pytest.raises(ExecutionHalted) as halted:
            litellm.completion(**_args(server, "openai/gpt-4o-mini", "openai_url", max_retries=3))
    assert halted.value.reason == "retry_limit"
    assert server.count() == 1 and ctx.get_snapshot().step_count == 1  # the retry was never sent


def test_streams_left_open_are_settled_when_the_context_ends(
    server: FakeProvider, instrumented: None
) -> None:
    with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0)) as ctx:
        stream = litellm.completion(
            **_args(server, "anthropic/claude-haiku-4-5", "anthropic_url", stream=True)
        )
        next(stream)
        closed = litellm.completion(**_args(server, "openai/gpt-4o-mini", "openai_url", stream=True))
        next(closed)
        closed.close()
    nodes = ctx.graph.nodes()
    assert [n.status for n in nodes] == ["ok", "ok"]
    assert all(n.cost_usd == pytest.approx(n.reserved_usd) and n.cost_usd > 0 for n in nodes)
    assert type(stream) is litellm.CustomStreamWrapper


def test_a_stream_read_to_the_end_without_usage_is_not_charged_its_reservation(
    server: FakeProvider, instrumented: None
) -> None:
    # No stream_options: the provider reports no usage; LiteLLM counts the tokens of the final chunk.
    with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0)) as ctx:
        list(litellm.completion(**_args(server, "openai/gpt-4o-mini", "openai_url", stream=True)))
    node = ctx.graph.nodes()[0]
    assert 0 < node.cost_usd < node.reserved_usd and node.tokens_out > 0


@pytest.mark.anyio
async def test_concurrent_tasks_never_overshoot(server: FakeProvider, instrumented: None) -> None:
    from veronica_mw.kernel.pricing import TokenUsage, price_usage

    worst = price_usage(TokenUsage(8, 10_000), "gpt-4o-mini", "openai")
    budget = 10.5 * worst
    server.hold()
    async with ExecutionContext(
        ExecutionConfig(max_cost_usd=budget, max_steps=500, max_retries_total=0)
    ) as ctx:

        async def one() -> bool:
            try:
                await aplain_capped(server)
            except ExecutionHalted:
                return False
            return True

        tasks = [asyncio.create_task(one()) for _ in range(50)]
        assert await asyncio.to_thread(server.wait_for_requests, 10)
        while sum(t.done() for t in tasks) < 40:
            await asyncio.sleep(0.01)
        server.release()
        sent = sum(await asyncio.gather(*tasks))
    assert sent == 10 == server.count() == ctx.get_snapshot().step_count
    assert ctx.get_snapshot().cost_usd_accumulated <= budget


async def aplain_capped(server: FakeProvider) -> Any:
    return await litellm.acompletion(**_args(server, "openai/gpt-4o-mini", "openai_url", max_tokens=10_000))
