"""Offline CrewAI parts for the adapter tests: a model that keeps choosing a tool, and that tool.

Both count their own invocations in their bodies, so the tests assert what really ran.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

from crewai import Agent, Crew, Task
from crewai.agents.agent_builder.base_agent import BaseAgent
from crewai.llms.base_llm import BaseLLM
from crewai.tools import BaseTool
from pydantic import Field

from veronica_mw import ExecutionContext, TokenUsage
from veronica_mw.kernel.pricing import price_usage

USAGE = {"prompt_tokens": 1000, "completion_tokens": 100}
MODEL = "gpt-4o-mini"
CALL_PRICE = price_usage(TokenUsage(1000, 100), MODEL)  # what each fake call should cost


class ToolLoopLLM(BaseLLM):
    """Asks for the ``lookup`` tool with a new input on every call and never gives a final answer.

    ``native``: answer with native tool calls instead of CrewAI's text (ReAct) protocol.
    ``observe``: returns the context to read; the step count it shows *while the body runs* is
    appended to ``steps_seen`` (proof that the call was counted before it ran).
    ``barrier``: waited on at the first call (forces two crews to overlap).
    ``fail_with``: raise ``RuntimeError(fail_with)`` instead of answering.
    ``usage``: the raw usage reports each call makes (as CrewAI providers do).
    """

    native: bool = False
    observe: Callable[[], ExecutionContext | None] | None = None
    barrier: Any = None
    fail_with: str | None = None
    usage: list[dict[str, int]] = Field(default_factory=lambda: [dict(USAGE)])
    calls: int = 0
    acalls: int = 0
    steps_seen: list[int] = Field(default_factory=list)

    def supports_function_calling(self) -> bool:
        return self.native

    def _answer(self, tools: Any) -> Any:
        n = self.calls + self.acalls
        ctx = self.observe() if self.observe is not None else None
        if ctx is not None:
            self.steps_seen.append(ctx.get_snapshot().step_count)
        if self.barrier is not None and n == 1:
            self.barrier.wait(timeout=30)  # hang guard only
        if self.fail_with is not None:
            raise RuntimeError(self.fail_with)
        for report in self.usage:
            self._track_token_usage_internal(dict(report))
        if self.native:
            if not tools:  # the forced final answer is asked for without tools
                return "Final answer"
            function = {"name": "lookup", "arguments": json.dumps({"query": f"q{n}"})}
            return [{"id": f"call_{n}", "type": "function", "function": function}]
        return f'Thought: I need more data\nAction: lookup\nAction Input: {{"query": "q{n}"}}'

    def call(
        self, messages: Any, tools: Any = None, callbacks: Any = None, available_functions: Any = None,
        from_task: Any = None, from_agent: Any = None, response_model: Any = None, **kwargs: Any,
    ) -> Any:
        self.calls += 1
        return self._answer(tools)

    async def acall(
        self, messages: Any, tools: Any = None, callbacks: Any = None, available_functions: Any = None,
        from_task: Any = None, from_agent: Any = None, response_model: Any = None, **kwargs: Any,
    ) -> Any:
        self.acalls += 1
        await asyncio.sleep(0)
        return self._answer(tools)


class LookupTool(BaseTool):
    name: str = "lookup"
    description: str = "Look a query up."
    runs: int = 0
    lock: Any = Field(default_factory=threading.Lock)

    def _run(self, query: str) -> str:
        with self.lock:
            self.runs += 1
            return f"result {self.runs} for {query}"


class Crewed:
    """A crew of ``tasks`` sequential tasks, each with its own agent, model and tool."""

    def __init__(self, tasks: int = 1, *, max_iter: int = 25, **llm_options: Any) -> None:
        self.llms = [ToolLoopLLM(model=MODEL, **llm_options) for _ in range(tasks)]
        self.tools = [LookupTool() for _ in range(tasks)]
        self.agents = [
            Agent(role=f"researcher {i}", goal="find facts", backstory="thorough", llm=llm, tools=[tool],
                  max_iter=max_iter, verbose=False)
            for i, (llm, tool) in enumerate(zip(self.llms, self.tools, strict=True))
        ]
        task_list = [
            Task(description=f"research {i}", expected_output="facts", agent=agent)
            for i, agent in enumerate(self.agents)
        ]
        crew_agents: list[BaseAgent] = list(self.agents)
        self.crew = Crew(agents=crew_agents, tasks=task_list, verbose=False)

    @property
    def llm(self) -> ToolLoopLLM:
        return self.llms[0]

    @property
    def tool(self) -> LookupTool:
        return self.tools[0]

    def counts(self) -> list[tuple[int, int]]:
        """(model calls, tool runs) per task, as counted in their bodies."""
        return [(llm.calls + llm.acalls, tool.runs) for llm, tool in zip(self.llms, self.tools, strict=True)]
