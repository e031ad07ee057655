"""``veronica-mw run`` on a script that loops over the OpenAI SDK (which it never instruments itself)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from ...support.fake_provider import FakeProvider, cost_of

SCRIPT = """
import os, openai
client = openai.OpenAI(base_url=os.environ["FAKE_PROVIDER_URL"], api_key="test", max_retries=0)
for _ in range(100):  # a runaway loop
    client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "again"}])
"""


def test_run_halts_a_runaway_sdk_loop(tmp_path: Path) -> None:
    script = tmp_path / "runaway.py"
    script.write_text(textwrap.dedent(SCRIPT))
    with FakeProvider() as server:
        done = subprocess.run(
            [sys.executable, "-m", "veronica_mw.cli", "run", "--max-steps", "4", "--json", str(script)],
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, "FAKE_PROVIDER_URL": server.openai_url},
        )
        assert done.returncode == 3, done.stderr
        assert server.count() == 4
        report = json.loads(done.stderr.strip().splitlines()[-1])
        assert report["reason"] == "step_limit" and report["steps"] == 4
        assert abs(report["cost_usd"] - cost_of(server.reported, "openai")) < 1e-9
