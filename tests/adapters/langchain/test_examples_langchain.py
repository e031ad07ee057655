"""The README's runnable example for this framework runs offline and really halts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
QUIET = {"CREWAI_DISABLE_TELEMETRY": "true", "OTEL_SDK_DISABLED": "true", "CREWAI_TRACING_ENABLED": "false"}


@pytest.mark.parametrize("script", ["langchain_chain.py", "langgraph_agent.py"])
def test_example_runs_offline_and_halts(script: str) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **QUIET},
        cwd=EXAMPLES.parent,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "halted" in done.stdout
