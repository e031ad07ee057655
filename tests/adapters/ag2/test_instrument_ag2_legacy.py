"""``veronica_mw.instrument()`` and ``veronica-mw run`` contain AG2 0.14 agents given no capability:
tool runs are steps admitted before they run (in process, under the CLI, under the ASGI middleware)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from autogen import ConversableAgent
from fastapi import FastAPI

import veronica_mw
from veronica_mw import ExecutionContext, ExecutionHalted
from veronica_mw.adapters.ag2 import VeronicaCapability
from veronica_mw.web.asgi import VeronicaASGIMiddleware

from .test_ag2_legacy import _lookup, limits, tool_pair


@pytest.fixture(autouse=True)
def instrumented() -> Iterator[None]:
    assert "ag2" in veronica_mw.instrument("ag2")
    yield
    veronica_mw.uninstrument()


@pytest.mark.parametrize("use_async", [False, True], ids=["initiate_chat", "a_initiate_chat"])
def test_tool_runs_are_steps_without_any_capability(use_async: bool) -> None:
    calls: list[Any] = []
    runs: list[str] = []
    user, assistant = tool_pair(calls, _lookup(runs))

    async def chat() -> None:
        async with ExecutionContext(limits(6)) as ctx:
            with pytest.raises(ExecutionHalted):
                await user.a_initiate_chat(assistant, message="Find x.", silent=True)
        assert ctx.get_snapshot().step_count == 6

    if use_async:
        asyncio.run(chat())
    else:
        with ExecutionContext(limits(6)) as ctx:
            with pytest.raises(ExecutionHalted):
                user.initiate_chat(assistant, message="Find x.", silent=True)
        assert ctx.get_snapshot().step_count == 6
    # model, tool, model, tool, model, tool: the 4th model call is refused before it is made.
    assert (len(calls), len(runs)) == (3, 3)


def test_an_explicit_capability_replaces_the_shared_one() -> None:
    calls: list[Any] = []
    runs: list[str] = []
    user, assistant = tool_pair(calls, _lookup(runs))
    with ExecutionContext(limits(100)) as first:
        user.generate_reply(messages=[{"role": "user", "content": "hi"}])  # gets the shared capability
    assert first.get_snapshot().step_count == 0  # the user has no model: nothing to count
    capability = VeronicaCapability(config=limits(4))
    capability.add_to_agent(user)
    capability.add_to_agent(assistant)
    with pytest.raises(ExecutionHalted):  # no current context: the capability's own one applies
        user.initiate_chat(assistant, message="Find x.", silent=True)
    owned = capability.owned_context
    assert owned is not None and owned.get_snapshot().step_count == 4
    assert (len(calls), len(runs)) == (2, 2)


def test_requests_under_the_asgi_middleware_halt_at_exactly_their_limit(serve: Callable[[Any], str]) -> None:
    per_request: list[tuple[list[Any], list[str]]] = []
    app = FastAPI()

    @app.post("/find")
    async def find() -> dict[str, Any]:
        calls: list[Any] = []
        runs: list[str] = []
        per_request.append((calls, runs))
        user, assistant = tool_pair(calls, _lookup(runs))
        result = await user.a_initiate_chat(assistant, message="Find x.", silent=True)
        return {"summary": result.summary}  # unreachable: the model never stops calling the tool

    app.add_middleware(VeronicaASGIMiddleware, config=limits(5))

    async def many() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=serve(app), timeout=30.0) as client:
            return list(await asyncio.gather(*(client.post("/find") for _ in range(4))))

    for response in asyncio.run(many()):
        assert response.status_code == 429
        assert (response.json()["reason"], response.json()["steps_used"]) == ("step_limit", 5)
    # model, tool, model, tool, model per request: the third tool run is refused.
    assert sorted((len(calls), len(runs)) for calls, runs in per_request) == [(3, 2)] * 4


SCRIPT = """
from types import SimpleNamespace
from autogen import ConversableAgent, register_function

RUNS = []
CALLS = []

class Client:
    def __init__(self, config, **kwargs):
        self.model = config["model"]
    def create(self, params):
        CALLS.append(1)
        call = {"id": f"c{len(CALLS)}", "type": "function",
                "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return SimpleNamespace(id="r", model=self.model, message=message)
    def message_retrieval(self, response):
        return [dict(response.message)]
    def cost(self, response):
        return 0.0
    @staticmethod
    def get_usage(response):
        return {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15, "cost": 0.0,
                "model": response.model}

def lookup(q: str) -> str:
    RUNS.append(q)
    return "found"

config = {"config_list": [{"model": "gpt-4o-mini", "model_client_cls": "Client"}]}
assistant = ConversableAgent("assistant", llm_config=config, human_input_mode="NEVER",
                             max_consecutive_auto_reply=100, code_execution_config=False)
user = ConversableAgent("user", llm_config=False, human_input_mode="NEVER",
                        max_consecutive_auto_reply=100, code_execution_config=False)
register_function(lookup, caller=assistant, executor=user, name="lookup", description="Look it up.")
assistant.register_model_client(Client)
try:
    user.initiate_chat(assistant, message="Find x.", silent=True)
finally:
    print(len(CALLS), len(RUNS))
"""


def test_veronica_mw_run_counts_the_same(tmp_path: Path) -> None:
    script = tmp_path / "agents.py"
    script.write_text(textwrap.dedent(SCRIPT))
    done = subprocess.run(
        [sys.executable, "-m", "veronica_mw.cli", "run", "--json", "--max-steps", "6", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ.copy(),
    )
    assert done.returncode == 3, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["3", "3"], done.stdout[-2000:]  # 3 model calls, 3 tool runs
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert (report["steps"], report["reason"]) == (6, "step_limit")


def test_over_the_instrumented_openai_sdk_one_model_call_is_one_step() -> None:
    from ...support.fake_provider import FakeProvider

    assert "openai" in veronica_mw.instrument("openai")
    with FakeProvider() as server:
        config = {"config_list": [{"model": "gpt-4o-mini", "base_url": server.openai_url, "api_key": "test"}]}
        planner, critic = (
            ConversableAgent(
                name,
                llm_config=config,
                human_input_mode="NEVER",
                max_consecutive_auto_reply=100,
                code_execution_config=False,
            )
            for name in ("planner", "critic")
        )
        with ExecutionContext(limits(4)) as ctx:
            with pytest.raises(ExecutionHalted):
                planner.initiate_chat(critic, message="Draft a plan.", silent=True)
        assert server.count() == 4  # the 5th request is refused before it is sent
    nodes = ctx.graph.nodes()
    assert ctx.get_snapshot().step_count == 4 and [n.name for n in nodes].count("ag2:critic") == 2
    assert all(n.settled and n.cost_usd > 0 for n in nodes)  # priced from what the provider reported
