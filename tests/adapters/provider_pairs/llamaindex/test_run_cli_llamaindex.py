"""``veronica-mw run`` on an unmodified LlamaIndex script whose ``OpenAI`` LLM talks to the fake
provider through ``api_base``: the LlamaIndex handler and the instrumented OpenAI SDK see each request
and count it once (steps == requests the server received), under ``--max-steps`` and ``--max-cost-usd``."""

from __future__ import annotations

from pathlib import Path

import pytest

from ....support.fake_provider import FakeProvider, cost_of
from ....support.run_cli import refused_at, run_script

SCRIPT = """
import os
from llama_index.core.llms import ChatMessage
from llama_index.llms.openai import OpenAI

llm = OpenAI(model="gpt-4o-mini", api_base=os.environ["FAKE_PROVIDER_URL"], api_key="test", max_retries=0)
answered = 0
try:
    for i in range(50):
        llm.chat([ChatMessage(role="user", content=f"question {i}")])
        answered += 1
finally:
    print(answered)
"""


def test_run_halts_at_exactly_max_steps_requests(tmp_path: Path) -> None:
    with FakeProvider() as server:
        done, report = run_script(
            tmp_path, SCRIPT, ["--max-steps", "3"], env={"FAKE_PROVIDER_URL": server.openai_url}
        )
        assert done.returncode == 3, done.stderr[-3000:]
        assert server.count() == 3 == int(done.stdout.split()[-1])
    assert (report["steps"], report["reason"]) == (3, "step_limit")


def test_run_halts_on_cost_at_the_reported_usage(tmp_path: Path) -> None:
    budget = 0.00003
    with FakeProvider() as server:
        flags = ["--max-cost-usd", repr(budget), "--max-output-tokens", "10"]
        done, report = run_script(tmp_path, SCRIPT, flags, env={"FAKE_PROVIDER_URL": server.openai_url})
        assert done.returncode == 3, done.stderr[-3000:]
        sent = server.count()
        assert sent >= 2 and sent == int(done.stdout.split()[-1]) == report["steps"]
        assert report["cost_usd"] == pytest.approx(cost_of(server.reported, "openai"))
    assert report["cost_usd"] <= budget < refused_at(report)
