"""google-genai automatic function calling: each Python tool the SDK runs is a step admitted before it
runs, in every call shape (sync, async, streamed, chats); a refused one ends the loop with the halt.

The fake Gemini endpoint asks for ``lookup`` on every turn, so the SDK's loop never ends by itself;
the tool body counts its own runs and the server its requests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from google import genai
from google.genai import types

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted

from ...support.fake_gemini_tools import FakeGeminiTools

pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")

MODEL = "gemini-2.0-flash"
RUNS: list[str] = []


def lookup(q: str) -> str:
    """Look something up."""
    RUNS.append(q)
    return f"found {q}"


async def alookup(q: str) -> str:
    """Look something up."""
    RUNS.append(q)
    return f"found {q}"


alookup.__name__ = "lookup"  # the name the model calls it by


def config(tool: Callable[..., Any] = lookup) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(
        tools=[tool],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(maximum_remote_calls=100),
    )


@pytest.fixture
def server() -> Iterator[FakeGeminiTools]:
    RUNS.clear()
    with FakeGeminiTools() as fake:
        yield fake


@pytest.fixture
def client(server: FakeGeminiTools) -> Iterator[genai.Client]:
    veronica_mw.instrument("google-genai")
    sdk = genai.Client(api_key="test", http_options=types.HttpOptions(base_url=server.url))
    yield sdk
    sdk.close()
    veronica_mw.uninstrument()


@pytest.fixture
async def aclient(server: FakeGeminiTools) -> AsyncIterator[genai.Client]:
    veronica_mw.instrument("google-genai")
    sdk = genai.Client(api_key="test", http_options=types.HttpOptions(base_url=server.url))
    yield sdk
    await sdk.aio.aclose()
    sdk.close()
    veronica_mw.uninstrument()


def generate(c: genai.Client) -> None:
    c.models.generate_content(model=MODEL, contents="Find x.", config=config())


def stream(c: genai.Client) -> None:
    for _ in c.models.generate_content_stream(model=MODEL, contents="Find x.", config=config()):
        pass


def chat(c: genai.Client) -> None:
    c.chats.create(model=MODEL, config=config()).send_message("Find x.")


def chat_stream(c: genai.Client) -> None:
    for _ in c.chats.create(model=MODEL, config=config()).send_message_stream("Find x."):
        pass


async def agenerate(c: genai.Client) -> None:
    await c.aio.models.generate_content(model=MODEL, contents="Find x.", config=config(alookup))


async def agenerate_sync_tool(c: genai.Client) -> None:  # run by the SDK in a worker thread
    await c.aio.models.generate_content(model=MODEL, contents="Find x.", config=config(lookup))


async def astream(c: genai.Client) -> None:
    async for _ in await c.aio.models.generate_content_stream(
        model=MODEL, contents="Find x.", config=config(alookup)
    ):
        pass


async def achat(c: genai.Client) -> None:
    await c.aio.chats.create(model=MODEL, config=config(alookup)).send_message("Find x.")


def limits(steps: int) -> ExecutionConfig:
    return ExecutionConfig(max_cost_usd=10.0, max_steps=steps, max_retries_total=0)


def _check(ctx: ExecutionContext, server: FakeGeminiTools, steps: int) -> None:
    snap = ctx.get_snapshot()
    # model, tool, model, tool, ...: at 6 the 4th request is refused, at 5 the 3rd tool run.
    expected = {6: (3, 3), 5: (3, 2)}[steps]
    assert (server.count(), len(RUNS)) == expected
    assert snap.step_count == steps == server.count() + len(RUNS) and snap.abort_reason == "step_limit"
    tools = [n for n in ctx.graph.nodes() if n.kind == "tool"]
    assert [n.name for n in tools] == ["google_genai.tool:" + tools[0].name.split(":")[1]] * len(RUNS)


@pytest.mark.parametrize("steps", [6, 5])
@pytest.mark.parametrize("shape", [generate, stream, chat, chat_stream])
def test_sync_shapes(client: genai.Client, server: FakeGeminiTools, shape: Any, steps: int) -> None:
    with ExecutionContext(limits(steps)) as ctx:
        with pytest.raises(ExecutionHalted) as halted:
            shape(client)
    assert halted.value.reason == "step_limit"
    _check(ctx, server, steps)


@pytest.mark.anyio
@pytest.mark.parametrize("steps", [6, 5])
@pytest.mark.parametrize("shape", [agenerate, agenerate_sync_tool, astream, achat])
async def test_async_shapes(
    aclient: genai.Client,
    server: FakeGeminiTools,
    shape: Callable[[genai.Client], Awaitable[None]],
    steps: int,
) -> None:
    async with ExecutionContext(limits(steps)) as ctx:
        with pytest.raises(ExecutionHalted) as halted:
            await shape(aclient)
    assert halted.value.reason == "step_limit"
    _check(ctx, server, steps)


def test_outside_a_context_the_sdk_runs_its_loop_as_before(
    client: genai.Client, server: FakeGeminiTools
) -> None:
    short = types.GenerateContentConfig(
        tools=[lookup],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(maximum_remote_calls=3),
    )
    client.models.generate_content(model=MODEL, contents="Find x.", config=short)
    assert (server.count(), len(RUNS)) == (3, 2)
