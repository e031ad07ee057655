"""``veronica-mw run``: the program runs inside one context, its spend is reported on stderr, and
the exit status is the program's own or 3 when it was halted. (The OpenAI-SDK version of this test
lives with the OpenAI adapter's tests.)"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

LOOP = """
import sys, threading
from veronica_mw import get_current_execution_context

def call(i):
    return get_current_execution_context().call_llm(lambda: f"answer {i}")

mode = sys.argv[1]
if mode == "thread":  # worker threads see the run's context too
    errors = []
    def work():
        try:
            for i in range(10):
                call(i)
        except Exception as exc:
            errors.append(exc)
    t = threading.Thread(target=work)
    t.start(); t.join()
    raise errors[0]
if mode == "exit":
    call(0)
    sys.exit(int(sys.argv[2]))
if mode == "caught":
    try:
        for i in range(10):
            call(i)
    except RuntimeError:
        print("caught it")
for i in range(int(sys.argv[2]) if len(sys.argv) > 2 else 10):
    call(i)
print("finished")
"""


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "veronica_mw.cli", "run", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "loop.py"
    path.write_text(textwrap.dedent(LOOP))
    return str(path)


def test_a_halted_program_exits_3_with_a_summary(script: str) -> None:
    done = run("--max-steps", "3", script, "loop")
    assert done.returncode == 3
    assert "finished" not in done.stdout
    assert done.stderr.strip().splitlines()[-1].startswith("veronica-mw: halted: step_limit")
    assert "steps 3," in done.stderr


def test_json_report(script: str) -> None:
    done = run("--json", "--max-steps", "4", "--max-cost-usd", "1", script, "loop")
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["reason"] == "step_limit" and report["steps"] == 4 and report["exit_status"] == 3
    assert report["limits"] == {
        "max_cost_usd": 1.0,
        "max_steps": 4,
        "max_retries_total": None,
        "timeout_ms": None,
        "max_output_tokens": None,
        "fit_output": False,
    }


def test_unlimited_by_default_and_the_programs_status(script: str) -> None:
    done = run("--json", script, "loop", "25")
    assert done.returncode == 0 and "finished" in done.stdout
    assert json.loads(done.stderr.strip().splitlines()[-1])["steps"] == 25
    assert run(script, "exit", "7").returncode == 7


def test_halted_even_when_the_program_caught_it(script: str) -> None:
    done = run("--max-steps", "2", script, "caught")
    assert "caught it" in done.stdout and done.returncode == 3


def test_threads_started_by_the_program_are_contained(script: str) -> None:
    done = run("--max-steps", "5", script, "thread")
    assert done.returncode == 3 and "steps 5," in done.stderr


def test_module_mode(tmp_path: Path) -> None:
    (tmp_path / "loopmod.py").write_text(textwrap.dedent(LOOP))
    done = run("--max-steps", "1", "-m", "loopmod", "loop", "10", "--json", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("veronica-mw: halted")  # --json went to the module


@pytest.mark.parametrize(
    "args",
    [[], ["missing_script.py"], ["-m"], ["--max-steps", "-1", "x.py"], ["--max-steps", "two", "x.py"]],
)
def test_bad_arguments_exit_2_without_a_traceback(args: list[str]) -> None:
    done = run(*args)
    assert done.returncode == 2 and "Traceback" not in done.stderr
