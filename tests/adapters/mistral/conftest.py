from __future__ import annotations

from collections.abc import Iterator

import pytest
from mistralai.client import Mistral

import veronica_mw

from ...support.fake_mistral import FakeMistral


@pytest.fixture
def server() -> Iterator[FakeMistral]:
    with FakeMistral() as fake:
        yield fake


@pytest.fixture
def instrumented() -> Iterator[None]:
    assert veronica_mw.instrument("mistral") == ("mistral",)
    yield
    veronica_mw.uninstrument()


@pytest.fixture
def client(server: FakeMistral, instrumented: None) -> Mistral:
    return Mistral(api_key="test", server_url=server.url)
