from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import anthropic
import pytest

import veronica_mw

from ...support.fake_provider import FakeProvider


@pytest.fixture
def server() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


@pytest.fixture
def instrumented() -> Iterator[None]:
    assert veronica_mw.instrument("anthropic") == ("anthropic",)
    yield
    veronica_mw.uninstrument()


@pytest.fixture
def client(server: FakeProvider, instrumented: None) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.anthropic_url, api_key="test", max_retries=0) as sdk:
        yield sdk


@pytest.fixture
def aclient(server: FakeProvider, instrumented: None) -> anthropic.AsyncAnthropic:
    """An async client; a test closes it in its own event loop (``await aclient.close()``)."""
    return anthropic.AsyncAnthropic(base_url=server.anthropic_url, api_key="test", max_retries=0)


@pytest.fixture
def make_client(server: FakeProvider, instrumented: None) -> Iterator[Callable[..., anthropic.Anthropic]]:
    """Clients with their own options (``max_retries``), closed at teardown."""
    made: list[anthropic.Anthropic] = []

    def make(max_retries: int = 0) -> anthropic.Anthropic:
        made.append(
            anthropic.Anthropic(base_url=server.anthropic_url, api_key="test", max_retries=max_retries)
        )
        return made[-1]

    yield make
    for sdk in made:
        sdk.close()


@pytest.fixture
async def make_aclient(
    server: FakeProvider, instrumented: None
) -> AsyncIterator[Callable[..., anthropic.AsyncAnthropic]]:
    made: list[anthropic.AsyncAnthropic] = []

    def make(max_retries: int = 0) -> anthropic.AsyncAnthropic:
        made.append(
            anthropic.AsyncAnthropic(base_url=server.anthropic_url, api_key="test", max_retries=max_retries)
        )
        return made[-1]

    yield make
    for sdk in made:
        await sdk.close()
