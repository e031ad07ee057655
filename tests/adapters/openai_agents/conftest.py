"""Agents SDK adapter tests: the real openai-agents SDK with offline fake models, tracing off."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# The SDK exports traces to OpenAI by default; tests never touch the network.
os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"

from agents import set_tracing_disabled  # noqa: E402

import veronica_mw  # noqa: E402
from veronica_mw.adapters import openai_agents  # noqa: E402

set_tracing_disabled(True)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def runner_left_unpatched() -> Iterator[None]:
    """Each test leaves the SDK's Runner as it found it (uninstrumented)."""
    yield
    patched = openai_agents.instrumented()
    veronica_mw.uninstrument()
    openai_agents.uninstrument()
    assert not patched, "test left the Agents SDK instrumented"
