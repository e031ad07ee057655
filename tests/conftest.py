from __future__ import annotations

import os

import pytest

# Frameworks that phone home must never try the network in tests.
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
