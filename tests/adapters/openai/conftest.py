from __future__ import annotations

from collections.abc import Iterator

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
    return openai.AsyncOpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
