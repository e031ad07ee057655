from __future__ import annotations

from collections.abc import Iterator

import pytest

import veronica_mw

from ...support.fake_provider import FakeProvider


@pytest.fixture
def server() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


@pytest.fixture
def sdks() -> Iterator[None]:
    """The provider SDKs instrumented underneath the framework adapter under test."""
    veronica_mw.instrument("openai", "anthropic")
    yield
    veronica_mw.uninstrument()
