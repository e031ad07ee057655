"""``veronica-mw run`` on a LangChain script: the adapter and the OpenAI instrumentation are switched
on when the script imports them, and each model call is one step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ....support.fake_provider import FakeProvider, cost_of
from ....support.run_cli import refused_at, run_script

SCRIPT = """
import os
from langchain_openai import ChatOpenAI
from veronica_mw import ExecutionHalted, get_current_execution_context
URL = os.environ["FAKE_PROVIDER_URL"]
model = ChatOpenAI(model="gpt-4o-mini", base_url=URL, api_key="test", max_retries=0)
try:
    for i in range(50):
        model.invoke(f"question {i}")
except ExecutionHalted:
    print(sorted({node.name for node in get_current_execution_context().graph.nodes()}))
"""


def test_run_contains_a_langchain_loop(tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text(textwrap.dedent(SCRIPT))
    with FakeProvider() as server:
        done = subprocess.run(
            [sys.executable, "-m", "veronica_mw.cli", "run", "--json", "--max-steps", "3", str(script)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "FAKE_PROVIDER_URL": server.openai_url},
        )
        assert done.returncode == 3, done.stderr[-3000:]
        assert server.count() == 3
    assert done.stdout.strip() == "['ChatOpenAI']"  # the LangChain handler's steps, adopted underneath
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["steps"] == 3 and report["reason"] == "step_limit"


COUNTED = """
import os
from langchain_openai import ChatOpenAI
URL = os.environ["FAKE_PROVIDER_URL"]
model = ChatOpenAI(model="gpt-4o-mini", base_url=URL, api_key="test", max_retries=0)
answered = 0
try:
    for i in range(50):
        model.invoke(f"question {i}")
        answered += 1
finally:
    print(answered)
"""


def test_run_halts_a_langchain_loop_on_cost(tmp_path: Path) -> None:
    """Unmodified: the script never imports veronica_mw; cost is the usage the server reported."""
    budget = 0.00003
    with FakeProvider() as server:
        flags = ["--max-cost-usd", repr(budget), "--max-output-tokens", "10"]
        done, report = run_script(tmp_path, COUNTED, flags, env={"FAKE_PROVIDER_URL": server.openai_url})
        assert done.returncode == 3, done.stderr[-3000:]
        sent = server.count()
        assert sent >= 2 and sent == int(done.stdout.split()[-1]) == report["steps"]
        assert report["cost_usd"] == pytest.approx(cost_of(server.reported, "openai"))
    assert report["cost_usd"] <= budget < refused_at(report)
