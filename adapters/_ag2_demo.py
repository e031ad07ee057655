"""The paper's multi-agent scenario on real AG2, offline: a planner and a critic revising forever.

Baseline: 30 iterations (the planner drafts with its model, the critic reviews with its model) with
nothing but AG2. Contained: the same loop with the AG2 adapter under a coordinator context with
``max_steps=8`` that gives each agent its own share (``coordinator.child(...)``, 5 steps each: the
shares add up to more than the coordinator has, and the coordinator still bounds their sum). Both
use scripted fake models that report token usage, and count how often they were really called.
Used by ``veronica-mw demo``; it raises :class:`~veronica_mw.MissingFrameworkError` without AG2.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
from collections.abc import Coroutine, Iterator
from types import SimpleNamespace
from typing import Any

from .. import ExecutionConfig, ExecutionContext, ExecutionHalted, TokenUsage
from ..kernel.pricing import price_usage
from .ag2 import FRAMEWORK_VERSION, GENERATION

__all__ = ["run_multi_agent_scenario"]

MODEL = "gpt-4o-mini"
USAGE = TokenUsage(input_tokens=400, output_tokens=150)
TASK = "Draft a launch plan for the new billing service."


def run_multi_agent_scenario(iterations: int = 30, max_steps: int = 8) -> dict[str, Any]:
    """Run baseline and contained loops; return a JSON-able summary of what each cost."""
    run = _legacy_loop if GENERATION == "0.14" else _v1_loop
    baseline_calls, _ = run(iterations, None)
    config = ExecutionConfig(max_cost_usd=1.0, max_steps=max_steps, max_retries_total=0)
    context = ExecutionContext(config, parent=None, name="coordinator")
    share = max_steps // 2 + 1
    agents = {role: context.child(role, max_cost_usd=0.5, max_steps=share) for role in ("planner", "critic")}
    contained_calls, halted = run(iterations, agents)
    snapshot = context.get_snapshot()
    per_call = price_usage(USAGE, MODEL)
    return {
        "scenario": "multi_agent_loop",
        "description": f"AG2 planner/critic loop, {iterations} iterations",
        "framework": f"ag2 {FRAMEWORK_VERSION}",
        "adapter": "VeronicaCapability" if GENERATION == "0.14" else "VeronicaMiddleware",
        "config": config.as_dict(),
        "baseline_llm_calls": baseline_calls,
        "contained_llm_calls": contained_calls,
        "reduction_pct": round(100.0 * (1 - contained_calls / baseline_calls), 1) if baseline_calls else 0.0,
        "baseline_cost_usd": round(per_call * baseline_calls, 8),
        "contained_cost_usd": round(snapshot.cost_usd_accumulated, 8),
        "halted": halted is not None,
        "halt_reason": halted.reason if halted is not None else None,
        "halt_detail": halted.detail if halted is not None else None,
        "steps_used": snapshot.step_count,
        "contexts": snapshot.as_dict(),
        "tree": context.tree(),
    }


# -- AG2 0.14 ------------------------------------------------------------------------------------


class _ScriptedClient:
    """An AG2 0.14 custom model client: numbered replies, fixed usage, calls counted in ``calls``."""

    def __init__(self, config: dict[str, Any], *, role: str, calls: list[str]) -> None:
        self.model = config["model"]
        self.role = role
        self.calls = calls
        self._ids = itertools.count(1)

    def create(self, params: dict[str, Any]) -> Any:
        self.calls.append(self.role)
        n = next(self._ids)
        text = (
            f"Plan v{n}: ..." if self.role == "planner" else f"Review {n}: the risks are not covered, revise."
        )
        return SimpleNamespace(id=f"{self.role}-{n}-{id(self)}", model=self.model, text=text)

    def message_retrieval(self, response: Any) -> list[str]:
        return [response.text]

    def cost(self, response: Any) -> float:
        return 0.0  # let genai-prices price the tokens

    @staticmethod
    def get_usage(response: Any) -> dict[str, Any]:
        return {
            "prompt_tokens": USAGE.input_tokens,
            "completion_tokens": USAGE.output_tokens,
            "total_tokens": USAGE.input_tokens + USAGE.output_tokens,
            "cost": response.cost,
            "model": response.model,
        }


class _Quiet:
    """An AG2 IOStream that prints nothing, so the demo's JSON stays the only output."""

    def print(self, *objects: Any, sep: str = " ", end: str = "\n", flush: bool = False) -> None:
        return None

    def send(self, message: Any) -> None:
        return None

    def input(self, prompt: str = "", *, password: bool = False) -> str:
        return ""


@contextlib.contextmanager
def _quiet_client_log() -> Iterator[None]:
    # AG2 0.14 logs an INFO line to stdout for every custom model client it sees.
    logger = logging.getLogger("autogen.oai.client")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


Contexts = dict[str, ExecutionContext] | None  # each agent's own context, or None (baseline)


def _legacy_loop(iterations: int, contexts: Contexts) -> tuple[int, ExecutionHalted | None]:
    with _quiet_client_log():
        return _legacy_chat(iterations, contexts)


def _legacy_chat(iterations: int, contexts: Contexts) -> tuple[int, ExecutionHalted | None]:
    from autogen import ConversableAgent  # type: ignore[import-not-found, unused-ignore]
    from autogen.io import IOStream  # type: ignore[import-not-found, unused-ignore]

    from ._ag2_legacy import VeronicaCapability

    calls: list[str] = []
    agents = []
    for role in ("planner", "critic"):
        agent = ConversableAgent(
            role,
            llm_config={"config_list": [{"model": MODEL, "model_client_cls": "_ScriptedClient"}]},
            max_consecutive_auto_reply=10 * iterations,
            human_input_mode="NEVER",
            code_execution_config=False,
        )
        # AG2 annotates the class parameter as a ModelClient instance, hence the ignore.
        agent.register_model_client(_ScriptedClient, role=role, calls=calls)  # type: ignore[arg-type, unused-ignore]
        agents.append(agent)
    planner, critic = agents
    if contexts is not None:
        for agent in agents:
            VeronicaCapability(contexts[agent.name]).add_to_agent(agent)

    def first_draft(sender: Any, recipient: Any, chat_context: Any) -> Any:
        # The planner's model writes the first draft too, so every iteration is two model calls.
        return sender.generate_reply(messages=[{"role": "user", "content": TASK}])

    try:
        with IOStream.set_default(_Quiet()):
            planner.initiate_chat(critic, message=first_draft, max_turns=iterations, silent=True)
    except ExecutionHalted as halted:
        return len(calls), halted
    return len(calls), None


# -- AG2 1.x -------------------------------------------------------------------------------------


def _v1_loop(iterations: int, contexts: Contexts) -> tuple[int, ExecutionHalted | None]:
    return _run_coroutine(_v1_chat(iterations, contexts))


async def _v1_chat(iterations: int, contexts: Contexts) -> tuple[int, ExecutionHalted | None]:
    from ag2 import Agent  # type: ignore[import-not-found, unused-ignore]
    from ag2.events import ModelMessage, ModelResponse  # type: ignore[import-not-found, unused-ignore]
    from ag2.events.types import Usage  # type: ignore[import-not-found, unused-ignore]
    from ag2.testing import TestConfig, TrackingConfig  # type: ignore[import-not-found, unused-ignore]

    from ._ag2_v1 import VeronicaMiddleware

    usage = Usage(prompt_tokens=USAGE.input_tokens, completion_tokens=USAGE.output_tokens)
    models = {}
    agents = {}
    for role, text in (("planner", "Plan: ..."), ("critic", "Review: the risks are not covered, revise.")):
        models[role] = TrackingConfig(TestConfig(ModelResponse(ModelMessage(text), usage=usage, model=MODEL)))
        middleware = [VeronicaMiddleware(contexts[role])] if contexts is not None else []
        agents[role] = Agent(role, config=models[role], middleware=middleware)
    message = TASK
    halted: ExecutionHalted | None = None
    try:
        for _ in range(iterations):
            message = str((await agents["planner"].ask(message)).body)
            message = str((await agents["critic"].ask(message)).body)
    except ExecutionHalted as exc:
        halted = exc
    return sum(model.mock.call_count for model in models.values()), halted


def _run_coroutine(coro: Coroutine[Any, Any, tuple[int, ExecutionHalted | None]]) -> tuple[int, Any]:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # Called from inside an event loop (e.g. an async CLI): run the demo's own loop elsewhere.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
