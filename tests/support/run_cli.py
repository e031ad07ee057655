"""Runs ``veronica-mw run --json`` on a script in a subprocess, as a user would, and reads its report.

The script is written to a file of its own and run unmodified (it never imports veronica_mw); the
repository root is on its ``PYTHONPATH`` so it can use the tests' fake models and servers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["ROOT", "refused_at", "run_script"]

ROOT = Path(__file__).resolve().parents[2]


def run_script(
    directory: Path,
    source: str,
    flags: Sequence[str],
    *,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run ``source`` under ``veronica-mw run --json <flags>``; return the process and its JSON report."""
    script = directory / "agent.py"
    script.write_text(textwrap.dedent(source))
    done = subprocess.run(
        [sys.executable, "-m", "veronica_mw.cli", "run", "--json", *flags, str(script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=directory,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )
    lines = done.stderr.strip().splitlines()
    assert lines, f"no report (exit {done.returncode}); stdout: {done.stdout[-2000:]}"
    try:
        report: dict[str, Any] = json.loads(lines[-1])
    except ValueError:
        raise AssertionError(f"no JSON report (exit {done.returncode}):\n{done.stderr[-3000:]}") from None
    return done, report


def refused_at(report: dict[str, Any]) -> float:
    """What the refused call would have brought the run to (spent + reserved + its own worst case),
    from a ``budget_exceeded`` report: more than the budget, or it was not refused. The detail's
    figures are rounded; the spent part is taken exact from ``cost_usd``."""
    detail = str(report["detail"])
    left, sep, _ = detail.rpartition(" > ")
    parts = left.split(" + ")
    assert report["reason"] == "budget_exceeded" and sep and parts[0].startswith("cost "), detail
    return float(report["cost_usd"]) + sum(float(part.split()[-1]) for part in parts[1:])
