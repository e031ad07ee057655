"""Google GenAI ``models.generate_content`` / ``generate_content_stream`` (sync and ``client.aio``)
through the real SDK against the fake server's Gemini endpoints."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from google import genai
from google.genai import types

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.kernel.pricing import TokenUsage

from ...support.fake_provider import FakeProvider, cost_of

# google-genai's async client subclasses aiohttp's ClientSession, which aiohttp warns about: not ours.
pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")

MODEL = "gemini-2.0-flash"
LIMITS = ExecutionConfig(max_cost_usd=1.0, max_steps=2, max_retries_total=0)


@pytest.fixture
def server() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


@pytest.fixture
def client(server: FakeProvider) -> Iterator[genai.Client]:
    assert veronica_mw.instrument("google-genai") == ("google-genai",)
    sdk = genai.Client(api_key="test", http_options=types.HttpOptions(base_url=server.url))
    yield sdk
    sdk.close()
    veronica_mw.uninstrument()


@pytest.fixture
async def aclient(server: FakeProvider) -> AsyncIterator[genai.Client]:
    veronica_mw.instrument("google-genai")
    sdk = genai.Client(api_key="test", http_options=types.HttpOptions(base_url=server.url))
    yield sdk
    await sdk.aio.aclose()
    sdk.close()
    veronica_mw.uninstrument()


def plain(c: genai.Client) -> Any:
    response = c.models.generate_content(model=MODEL, contents="Say hello to the fake provider.")
    assert isinstance(response, types.GenerateContentResponse) and response.text
    return response


def streamed(c: genai.Client) -> Any:
    return [chunk.text for chunk in c.models.generate_content_stream(model=MODEL, contents="Stream it.")]


async def aplain(c: genai.Client) -> Any:
    return await c.aio.models.generate_content(model=MODEL, contents="Say hello to the fake provider.")


async def astreamed(c: genai.Client) -> Any:
    stream = await c.aio.models.generate_content_stream(model=MODEL, contents="Stream it.")
    return [chunk.text async for chunk in stream]


def _check(ctx: ExecutionContext, server: FakeProvider) -> None:
    snap = ctx.get_snapshot()
    assert server.count() == 2 and snap.step_count == 2 and snap.abort_reason == "step_limit"
    assert snap.cost_usd_accumulated == pytest.approx(cost_of(server.reported, "google"))
    assert [n.tokens_out for n in ctx.graph.nodes()] == [r.output_tokens for r in server.reported]


@pytest.mark.parametrize("shape", [plain, streamed], ids=["generate_content", "generate_content_stream"])
def test_sync(client: genai.Client, server: FakeProvider, shape: Callable[[genai.Client], Any]) -> None:
    with ExecutionContext(LIMITS) as ctx:
        shape(client)
        shape(client)
        with pytest.raises(ExecutionHalted):
            shape(client)
    _check(ctx, server)


@pytest.mark.parametrize(
    "shape", [aplain, astreamed], ids=["aio.generate_content", "aio.generate_content_stream"]
)
@pytest.mark.anyio
async def test_async(
    aclient: genai.Client, server: FakeProvider, shape: Callable[[genai.Client], Awaitable[Any]]
) -> None:
    async with ExecutionContext(LIMITS) as ctx:
        await shape(aclient)
        await shape(aclient)
        with pytest.raises(ExecutionHalted):
            await shape(aclient)
    _check(ctx, server)


def test_the_worst_case_is_reserved(client: genai.Client, server: FakeProvider) -> None:
    config = types.GenerateContentConfig(max_output_tokens=1_000_000)  # $0.40 at 0.40/1M output
    with ExecutionContext(ExecutionConfig(max_cost_usd=0.10, max_steps=5, max_retries_total=0)) as ctx:
        with pytest.raises(ExecutionHalted, match="budget_exceeded"):
            client.models.generate_content(model=MODEL, contents="too much", config=config)
    assert server.count() == 0 and ctx.get_snapshot().step_count == 0


def test_an_abandoned_stream_keeps_its_reservation(client: genai.Client) -> None:
    with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0)) as ctx:
        stream = client.models.generate_content_stream(model=MODEL, contents="Stream it.")
        next(stream)
        del stream
        gc.collect()
        left_open = client.models.generate_content_stream(model=MODEL, contents="Stream it.")
        next(left_open)
    nodes = ctx.graph.nodes()
    assert len(nodes) == 2 and all(n.settled and n.cost_usd == pytest.approx(n.reserved_usd) for n in nodes)
    assert all(n.cost_usd > 0 for n in nodes)


def test_usage_metadata_counts_thinking_as_output() -> None:
    from veronica_mw.adapters.google_genai import tokens

    usage = {"prompt_token_count": 10, "candidates_token_count": 5, "thoughts_token_count": 20}
    assert tokens(usage) == TokenUsage(10, 25, 0)
    assert tokens({"cached_content_token_count": 3}) is None


def test_outside_a_context_nothing_changes(client: genai.Client, server: FakeProvider) -> None:
    plain(client)
    assert streamed(client)
    assert server.count() == 2


@pytest.mark.anyio
async def test_an_async_stream_closed_after_one_event_is_charged_at_close(
    aclient: genai.Client, server: FakeProvider
) -> None:
    async with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=0)) as ctx:
        stream = await aclient.aio.models.generate_content_stream(model=MODEL, contents="Stream it.")
        await stream.__anext__()
        await stream.aclose()  # type: ignore[attr-defined]  # typed AsyncIterator; it is a generator
        (node,) = ctx.graph.nodes()
        # Settled at close, while the context is still open: the reservation stands as its cost.
        assert node.settled and node.cost_usd == pytest.approx(node.reserved_usd) and node.cost_usd > 0
        assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(node.cost_usd)
