from __future__ import annotations

import asyncio
import os
import warnings
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


@pytest.fixture
def closes_litellms_loop() -> Iterator[None]:
    """A sync ``litellm.completion(stream=True)`` leaves an event loop set on the thread (LiteLLM's,
    not ours); closed here, or a later async test drops it unclosed (a ResourceWarning)."""
    yield
    policy = asyncio.get_event_loop_policy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = policy.get_event_loop()
        except RuntimeError:  # none set on this thread (one was closed here before)
            return
    if not loop.is_running():
        loop.close()
        policy.set_event_loop(None)
