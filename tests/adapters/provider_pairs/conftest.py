from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

import veronica_mw
from veronica_mw import instrumentation as registry

from ...support.fake_provider import FakeProvider


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The frameworks create and keep their own SDK clients (LangChain caches them, AG2 and LlamaIndex
    # hold them on their models) and never close them: their sockets are reported when collected,
    # during whichever test runs then. Not ours to close, and not a failure of the test at hand.
    for item in items:
        item.add_marker(pytest.mark.filterwarnings("ignore::ResourceWarning"))
        item.add_marker(pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"))


@pytest.fixture(autouse=True)
def collect_leftovers() -> Iterator[None]:
    """Collect the frameworks' dropped clients while this test (and its warning filter) runs,
    rather than at interpreter exit, where pytest would report them as errors."""
    yield
    gc.collect()


@pytest.fixture
def server() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


@pytest.fixture
def sdks() -> Iterator[None]:
    """The provider SDKs instrumented underneath the framework adapter under test (those installed)."""
    veronica_mw.instrument(*(name for name in ("openai", "anthropic") if registry.installed(name)))
    yield
    veronica_mw.uninstrument()
