from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

import veronica_mw

from ...support.fake_provider import FakeProvider

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch the price map at import


@pytest.fixture
def server() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


@pytest.fixture
def instrumented() -> Iterator[None]:
    assert veronica_mw.instrument("litellm", "openai") == ("litellm", "openai")
    yield
    veronica_mw.uninstrument()
