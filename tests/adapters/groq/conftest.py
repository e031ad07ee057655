from __future__ import annotations

from collections.abc import Iterator

import groq
import pytest

import veronica_mw

from ...support.fake_groq import FakeGroq


@pytest.fixture
def server() -> Iterator[FakeGroq]:
    with FakeGroq() as fake:
        yield fake


@pytest.fixture
def instrumented() -> Iterator[None]:
    assert veronica_mw.instrument("groq") == ("groq",)
    yield
    veronica_mw.uninstrument()


@pytest.fixture
def client(server: FakeGroq, instrumented: None) -> Iterator[groq.Groq]:
    with groq.Groq(base_url=server.url, api_key="test", max_retries=0) as sdk:
        yield sdk
