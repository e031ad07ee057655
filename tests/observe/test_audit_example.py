"""examples/audit_app.py runs offline and writes a log that verifies, with its halted request shown."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import read_records, run_cli


def test_the_audit_example(
    run_example: Callable[[str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AUDIT_PATH", str(tmp_path / "logs" / "audit.jsonl"))
    monkeypatch.setenv("AUDIT_KEY", "example-key")
    out = run_example("audit_app.py")
    assert "status codes: [200, 200, 429]" in out
    assert re.search(r"^ok: \d+ records, 1 chains, head [0-9a-f]{64}$", out, re.M), out
    assert "GET /ask" in out and "halted: step_limit" in out
    records = read_records(tmp_path / "logs")
    assert sum(1 for r in records if r["type"] == "call") == 1 + 2 + 5
    assert all(r["request"]["messages"] for r in records if r["type"] == "call")
    key = tmp_path / "logs" / "key"
    assert run_cli("audit", "verify", tmp_path / "logs" / "audit.jsonl", "--key-file", key)[0] == 0
