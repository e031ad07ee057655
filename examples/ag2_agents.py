"""AG2 agents contained by veronica-mw, offline (fake models: no API key, no network).

Run:  python examples/ag2_agents.py

Works with either AG2 generation installed:

* ``ag2`` 0.14 (``import autogen``): a planner and a critic that would argue for 100 rounds get a
  :class:`VeronicaCapability`; the chat stops after 8 model calls. Once with the default
  ``on_halt="raise"`` (``initiate_chat`` raises ExecutionHalted), once with ``"terminate"`` (the
  chat returns at once with its transcript so far).
* ``ag2`` 1.x (``import ag2``): an agent whose model calls a tool forever gets a
  :class:`VeronicaMiddleware`; ``ask()`` raises ExecutionHalted after model, tool, model, tool,
  model.

Replace the fake models with your real ``llm_config`` / ``config`` and the budget is spent on
real usage, priced from the token counts the model client reports.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters import ag2 as veronica_ag2

LIMITS = ExecutionConfig(max_cost_usd=0.05, max_steps=8, max_retries_total=2)


class FakeModelClient:
    """An AG2 0.14 custom model client (``register_model_client``) reporting token usage."""

    def __init__(self, config: dict[str, Any], *, role: str) -> None:
        self.model, self.role, self.turn = config["model"], role, 0

    def create(self, params: dict[str, Any]) -> Any:
        self.turn += 1
        text = f"{self.role} turn {self.turn}: " + (
            "here is a plan" if self.role == "planner" else "revise it"
        )
        return SimpleNamespace(id=f"{self.role}-{self.turn}-{id(self)}", model=self.model, text=text)

    def message_retrieval(self, response: Any) -> list[str]:
        return [response.text]

    def cost(self, response: Any) -> float:
        return 0.0  # 0: veronica-mw prices the tokens below with genai-prices

    @staticmethod
    def get_usage(response: Any) -> dict[str, Any]:
        return {
            "prompt_tokens": 300,
            "completion_tokens": 80,
            "total_tokens": 380,
            "cost": 0.0,
            "model": response.model,
        }


def run_legacy() -> None:
    from autogen import ConversableAgent  # type: ignore[import-not-found, unused-ignore]

    from veronica_mw.adapters.ag2 import VeronicaCapability

    def agent(role: str) -> Any:
        llm_config = {"config_list": [{"model": "gpt-4o-mini", "model_client_cls": "FakeModelClient"}]}
        a = ConversableAgent(
            role, llm_config=llm_config, max_consecutive_auto_reply=100, human_input_mode="NEVER"
        )
        a.register_model_client(FakeModelClient, role=role)  # type: ignore[arg-type, unused-ignore]
        return a

    for on_halt in ("raise", "terminate"):
        planner, critic = agent("planner"), agent("critic")
        capability = VeronicaCapability(on_halt=on_halt)  # binds the current context at each reply
        capability.add_to_agent(planner)
        capability.add_to_agent(critic)
        with ExecutionContext(LIMITS) as ctx:
            try:
                result = planner.initiate_chat(critic, message="Plan the launch.", silent=True)
                print(f"[{on_halt}] chat ended with {len(result.chat_history)} messages")
            except ExecutionHalted as halted:
                print(f"[{on_halt}] halted: {halted.reason}; last reply: {halted.partial_result!r}")
        usage = ctx.get_snapshot()
        print(f"[{on_halt}] steps {usage.step_count}, cost ${usage.cost_usd_accumulated:.6f}")


async def run_v1() -> None:
    from ag2 import Agent, tool  # type: ignore[import-not-found, unused-ignore]
    from ag2.events import ToolCallEvent  # type: ignore[import-not-found, unused-ignore]
    from ag2.testing import TestConfig  # type: ignore[import-not-found, unused-ignore]

    from veronica_mw.adapters.ag2 import VeronicaMiddleware

    @tool  # type: ignore[untyped-decorator, unused-ignore]
    def search(query: str) -> str:
        """Search the docs."""
        print(f"  tool ran: search({query!r})")
        return "nothing found"

    forever = TestConfig(*[ToolCallEvent("search", arguments='{"query": "retry"}') for _ in range(100)])
    agent = Agent("researcher", config=forever, tools=[search], middleware=[VeronicaMiddleware()])
    async with ExecutionContext(ExecutionConfig(max_cost_usd=0.05, max_steps=5, max_retries_total=2)) as ctx:
        try:
            await agent.ask("Why do retries pile up?")
        except ExecutionHalted as halted:
            print(f"halted: {halted.reason}")
    print(f"steps {ctx.get_snapshot().step_count}")


if __name__ == "__main__":
    print(f"AG2 {veronica_ag2.FRAMEWORK_VERSION} ({veronica_ag2.GENERATION} generation)")
    if veronica_ag2.GENERATION == "0.14":
        run_legacy()
    else:
        asyncio.run(run_v1())
