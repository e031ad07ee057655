from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from veronica_mw import Observer, add_observer, remove_observer

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# Frameworks that phone home must never try the network in tests.
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def run_example() -> Callable[[str], str]:
    """Run ``examples/<script>`` in a subprocess (offline, telemetry off); return its stdout."""

    def run(script: str) -> str:
        done = subprocess.run(
            [sys.executable, str(EXAMPLES / script)],
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ),  # carries the telemetry switches set above
            cwd=EXAMPLES.parent,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    return run


@pytest.fixture
def watched_deadlines() -> Iterator[None]:
    """A global observer for the test: then every armed context's deadline is in the shared
    timeout pool (otherwise only a cancellation-token holder needs it fired, and calls check the
    deadline themselves), so counting the pool's timers counts the armed, not yet ended, contexts."""
    observer = Observer()
    add_observer(observer)
    try:
        yield
    finally:
        remove_observer(observer)
