"""``veronica-mw run``: ``--`` before the script, ``--max-output-tokens`` and ``--fit-output``
(their effect on real SDK requests is tested with the OpenAI adapter: test_run_fit_output.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

LOOP = """
import sys
from veronica_mw import get_current_execution_context
for i in range(int(sys.argv[1])):
    get_current_execution_context().call_llm(lambda: "answer")
print("args", sys.argv[1:])
"""

SETTINGS = """
import json
from veronica_mw import instrumentation
s = instrumentation.settings
print(json.dumps({"max_output_tokens": s.max_output_tokens, "fit_output": repr(s.fit_output)}))
"""


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "veronica_mw.cli", "run", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def test_a_double_dash_before_the_script_is_accepted(tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent(LOOP))
    done = run("--max-steps", "3", "--", str(script), "10", "--json")
    assert done.returncode == 3, done.stderr
    assert "steps 3," in done.stderr.strip().splitlines()[-1]  # --json went to the script


def test_max_output_tokens_and_fit_output_reach_the_provider_settings(tmp_path: Path) -> None:
    script = tmp_path / "settings.py"
    script.write_text(SETTINGS)
    done = run("--max-output-tokens", "512", "--fit-output", "--json", str(script))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "max_output_tokens": 512,
        "fit_output": "FitOutputToBudget(min_output_tokens=256)",
    }
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["limits"]["max_output_tokens"] == 512 and report["limits"]["fit_output"] is True
    plain = run(str(script))
    assert json.loads(plain.stdout) == {"max_output_tokens": 4096, "fit_output": "None"}


def test_a_bad_max_output_tokens_exits_2(tmp_path: Path) -> None:
    script = tmp_path / "settings.py"
    script.write_text(SETTINGS)
    done = run("--max-output-tokens", "-5", str(script))
    assert done.returncode == 2 and "Traceback" not in done.stderr and "max_output_tokens" in done.stderr
