"""examples/otel_fastapi.py runs offline and prints the console exporter's spans and the traces."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_example_prints_spans_under_the_server_span() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OTEL_SDK_DISABLED"}  # the example sets up the SDK
    done = subprocess.run(
        [sys.executable, "examples/otel_fastapi.py"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert out.count("[console exporter] chat gpt-4o-mini (client) input_tokens=120 output_tokens=40") == 3
    assert "GET /chat -> 200; GET /chat?tools=10 -> 429 step_limit" in out
    trees = out.split("Traces:\n", 1)[1].split("\nMetrics:", 1)[0].splitlines()
    assert [line.split(" veronica.chain_id=")[0] for line in trees] == [
        "GET /chat [SERVER]",
        "  chat gpt-4o-mini [CLIENT] veronica.step=1 veronica.status=ok",
        "  execute_tool search [INTERNAL] veronica.step=2 veronica.status=ok",
        "  chat gpt-4o-mini [CLIENT] veronica.step=3 veronica.status=ok",
        "GET /chat [SERVER]",
        "  event veronica.halt: reason=step_limit steps_used=5",
        "  chat gpt-4o-mini [CLIENT] veronica.step=1 veronica.status=ok",
        *[f"  execute_tool search [INTERNAL] veronica.step={n} veronica.status=ok" for n in (2, 3, 4, 5)],
    ]
    assert "veronica.halts [{halt}] {'veronica.reason': 'step_limit'} 1" in out
