"""Fixtures for the LlamaIndex adapter tests: real llama-index-core, offline fake models."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

import veronica_mw  # noqa: E402
from veronica_mw.adapters import _llamaindex_hooks  # noqa: E402
from veronica_mw.adapters.llamaindex import VeronicaLlamaIndexHandler  # noqa: E402


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def no_handler_left_installed() -> Iterator[None]:
    """Every test must leave LlamaIndex unpatched, or later tests would count in stale contexts."""
    yield
    veronica_mw.uninstrument()  # what a middleware (or instrument()) installed process-wide
    leftover = list(_llamaindex_hooks.installed)
    for handler in leftover:
        assert isinstance(handler, VeronicaLlamaIndexHandler)
        while handler.installed:
            handler.uninstall()
    assert not leftover, f"test left handlers installed: {leftover}"
