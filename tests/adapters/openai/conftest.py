from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import openai
import pytest

import veronica_mw

from ...support.fake_provider import FakeProvider


@pytest.fixture
def server() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


@pytest.fixture
def instrumented() -> Iterator[None]:
    assert veronica_mw.instrument("openai") == ("openai",)
    yield
    veronica_mw.uninstrument()


@pytest.fixture
def client(server: FakeProvider, instrumented: None) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0) as sdk:
        yield sdk


@pytest.fixture
def aclient(server: FakeProvider, instrumented: None) -> openai.AsyncOpenAI:
    """An async client; a test closes it in its own event loop (``await aclient.close()``)."""
    return openai.AsyncOpenAI(base_url=server.openai_url, api_key="test", max_retries=0)


@pytest.fixture
def make_client(server: FakeProvider, instrumented: None) -> Iterator[Callable[..., openai.OpenAI]]:
    """Clients with their own options (``max_retries``), closed at teardown."""
    made: list[openai.OpenAI] = []

    def make(max_retries: int = 0) -> openai.OpenAI:
        made.append(openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=max_retries))
        return made[-1]

    yield make
    for sdk in made:
        sdk.close()


@pytest.fixture
async def make_aclient(
    server: FakeProvider, instrumented: None
) -> AsyncIterator[Callable[..., openai.AsyncOpenAI]]:
    made: list[openai.AsyncOpenAI] = []

    def make(max_retries: int = 0) -> openai.AsyncOpenAI:
        made.append(openai.AsyncOpenAI(base_url=server.openai_url, api_key="test", max_retries=max_retries))
        return made[-1]

    yield make
    for sdk in made:
        await sdk.close()
