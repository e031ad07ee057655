"""A CrewAI crew contained by veronica-mw, offline (a fake model: no API key, no network).

Run:  python examples/crewai_crew.py

The researcher's model asks for the ``lookup`` tool on every turn and would loop until CrewAI's
``max_iter``. With ``max_steps=5`` the crew stops after model, tool, model, tool, model: the third
tool call is refused, ``kickoff`` raises ExecutionHalted, and the writer's task never starts.
A second run with a cost ceiling stops on the model's reported token usage instead.

Replace ``ScriptedLLM`` with your real ``LLM(model="gpt-4o-mini")``: CrewAI's providers report
token usage per call, which is priced offline with genai-prices.
"""

from __future__ import annotations

import os

# Before crewai is imported: otherwise its telemetry tries to reach the network.
os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
os.environ["OTEL_SDK_DISABLED"] = "true"
os.environ["CREWAI_TRACING_ENABLED"] = "false"

from typing import Any  # noqa: E402

from crewai import Agent, Crew, Task  # noqa: E402
from crewai.llms.base_llm import BaseLLM  # noqa: E402
from crewai.tools import BaseTool  # noqa: E402

from veronica_mw import ExecutionConfig, ExecutionHalted  # noqa: E402
from veronica_mw.adapters.crewai import VeronicaCrewAIHooks  # noqa: E402


class ScriptedLLM(BaseLLM):
    """A model that always wants one more lookup, and reports 1000 + 100 tokens per call."""

    calls: int = 0

    def call(
        self, messages: Any, tools: Any = None, callbacks: Any = None, available_functions: Any = None,
        from_task: Any = None, from_agent: Any = None, response_model: Any = None, **kwargs: Any,
    ) -> str:
        self.calls += 1
        self._track_token_usage_internal({"prompt_tokens": 1000, "completion_tokens": 100})
        return f'Thought: one more source\nAction: lookup\nAction Input: {{"query": "source {self.calls}"}}'


class Lookup(BaseTool):
    name: str = "lookup"
    description: str = "Look a query up in the archive."
    runs: int = 0

    def _run(self, query: str) -> str:
        self.runs += 1
        return f"archive entry for {query}"


def build() -> tuple[Crew, ScriptedLLM, Lookup]:
    llm, tool = ScriptedLLM(model="gpt-4o-mini"), Lookup()
    researcher = Agent(role="researcher", goal="collect sources", backstory="Never satisfied.",
                       llm=llm, tools=[tool], verbose=False)
    writer = Agent(role="writer", goal="write it up", backstory="Concise.", llm=llm, verbose=False)
    tasks = [
        Task(description="Collect sources on containment.", expected_output="sources", agent=researcher),
        Task(description="Summarise the sources.", expected_output="a summary", agent=writer),
    ]
    return Crew(agents=[researcher, writer], tasks=tasks, verbose=False), llm, tool


def run(title: str, config: ExecutionConfig) -> None:
    crew, llm, tool = build()
    hooks = VeronicaCrewAIHooks(config=config)
    with hooks:  # the hooks serve only the crews kicked off inside this block
        try:
            crew.kickoff()
            outcome = "finished"
        except ExecutionHalted as halted:
            outcome = f"halted: {halted.reason}"
    snap = hooks.binding.owned_context.get_snapshot()  # type: ignore[union-attr]
    print(f"{title}: {outcome}; model calls {llm.calls}, tool runs {tool.runs}, "
          f"steps {snap.step_count}, cost ${snap.cost_usd_accumulated:.6f}")


if __name__ == "__main__":
    run("step limit ", ExecutionConfig(max_cost_usd=1.0, max_steps=5, max_retries_total=2))
    run("cost limit ", ExecutionConfig(max_cost_usd=0.0005, max_steps=100, max_retries_total=2))
