"""CrewAI's native OpenAI provider over the instrumented OpenAI SDK: the CrewAI hooks' step and the
SDK request are one step (steps == requests the fake server received)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from crewai import LLM, Agent, Crew, Task

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters.crewai import VeronicaCrewAIHooks

from ....support.fake_provider import FakeProvider, cost_of

# CrewAI reads its own deprecated Agent fields (function_calling_llm, ...) while validating.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai")


@pytest.fixture
def hooks(sdks: None) -> Iterator[VeronicaCrewAIHooks]:
    installed = VeronicaCrewAIHooks().install()
    yield installed
    installed.uninstall()


def _llm(server: FakeProvider) -> LLM:
    return LLM(model="openai/gpt-4o-mini", base_url=server.openai_url, api_key="test", max_retries=0)


def test_direct_llm_calls_are_one_step_each(server: FakeProvider, hooks: VeronicaCrewAIHooks) -> None:
    llm = _llm(server)
    with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=2, max_retries_total=0)) as ctx:
        assert llm.call("hello")
        llm.call("again")
        with pytest.raises(ExecutionHalted):
            llm.call("refused")
    snap = ctx.get_snapshot()
    assert server.count() == 2 == snap.step_count
    assert snap.cost_usd_accumulated == pytest.approx(cost_of(server.reported, "openai"))


def test_a_crew_makes_one_step_per_model_request(server: FakeProvider, hooks: VeronicaCrewAIHooks) -> None:
    agent = Agent(role="writer", goal="write", backstory="writes", llm=_llm(server), max_iter=3)
    task = Task(description="Say hello.", expected_output="A greeting.", agent=agent)
    with ExecutionContext(ExecutionConfig(max_cost_usd=1.0, max_steps=20, max_retries_total=0)) as ctx:
        Crew(agents=[agent], tasks=[task]).kickoff()
    assert server.count() >= 1 and server.count() == ctx.get_snapshot().step_count
