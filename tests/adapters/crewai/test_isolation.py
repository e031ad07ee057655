"""Global CrewAI hooks count each run in its own context: concurrent crews never share counts.
Also: install()/uninstall() leave CrewAI exactly as they found it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from crewai.hooks import (
    get_after_llm_call_hooks,
    get_after_tool_call_hooks,
    get_before_llm_call_hooks,
    get_before_tool_call_hooks,
)

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters import crewai as adapter
from veronica_mw.adapters.crewai import VeronicaCrewAIHooks

from .fakes import Crewed, ToolLoopLLM

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai")

OURS = (adapter._before_llm, adapter._after_llm, adapter._before_tool, adapter._after_tool)


def limits(max_steps: int) -> ExecutionConfig:
    return ExecutionConfig(max_cost_usd=1.0, max_steps=max_steps, max_retries_total=3)


def registered() -> list[bool]:
    lists: tuple[list[Any], ...] = (
        get_before_llm_call_hooks(), get_after_llm_call_hooks(),
        get_before_tool_call_hooks(), get_after_tool_call_hooks(),
    )
    return [hook in hooks for hook, hooks in zip(OURS, lists, strict=True)]


def run_in_threads(*jobs: Callable[[], Any]) -> list[BaseException | None]:
    errors: list[BaseException | None] = [None] * len(jobs)

    def runner(i: int) -> None:
        try:
            jobs[i]()
        except BaseException as exc:  # collected and asserted by the test
            errors[i] = exc

    threads = [threading.Thread(target=runner, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)  # hang guard only
        assert not thread.is_alive()
    return errors


# Crew A may take 3 steps: model, tool, model, then its 2nd tool call is refused.
# Crew B may take 6: model, tool x3, then its 4th model call is refused.
EXPECTED = {"a": ([(2, 1)], 3), "b": ([(3, 3)], 6)}


def test_two_instances_in_two_threads_count_separately() -> None:
    barrier = threading.Barrier(2)  # both crews are inside their first model call at once
    hooks = {"a": VeronicaCrewAIHooks(config=limits(3)), "b": VeronicaCrewAIHooks(config=limits(6))}
    crews = {name: Crewed(barrier=barrier, observe=lambda h=h: h.context) for name, h in hooks.items()}

    def job(name: str) -> Callable[[], None]:
        def run() -> None:
            with hooks[name]:
                crews[name].crew.kickoff()
        return run

    errors = run_in_threads(job("a"), job("b"))
    for name, error in zip("ab", errors, strict=True):
        assert isinstance(error, ExecutionHalted) and error.reason == "step_limit"
        counts, steps = EXPECTED[name]
        assert crews[name].counts() == counts
        ctx = hooks[name].binding.owned_context
        assert ctx is not None and ctx.get_snapshot().step_count == steps
    assert crews["a"].llm.steps_seen == [1, 3]
    assert crews["b"].llm.steps_seen == [1, 3, 5]


def test_one_installed_instance_serves_each_request_context_separately() -> None:
    """The middleware shape: one process-wide instance, one ExecutionContext per request."""
    barrier = threading.Barrier(2)
    contexts = {"a": ExecutionContext(limits(3)), "b": ExecutionContext(limits(6))}
    crews = {name: Crewed(barrier=barrier) for name in contexts}

    def job(name: str) -> Callable[[], None]:
        def run() -> None:
            with contexts[name]:
                crews[name].crew.kickoff()
        return run

    hooks = VeronicaCrewAIHooks().install()
    try:
        errors = run_in_threads(job("a"), job("b"))
    finally:
        hooks.uninstall()
    for name, error in zip("ab", errors, strict=True):
        assert isinstance(error, ExecutionHalted) and error.reason == "step_limit"
        counts, steps = EXPECTED[name]
        assert crews[name].counts() == counts
        assert contexts[name].get_snapshot().step_count == steps


def test_a_with_block_owns_its_crews_even_beside_an_installed_instance() -> None:
    outer = VeronicaCrewAIHooks(config=limits(100)).install()
    inner = VeronicaCrewAIHooks(config=limits(3))
    try:
        with inner, pytest.raises(ExecutionHalted):
            Crewed().crew.kickoff()
        Crewed(max_iter=1).crew.kickoff()  # outside the block: the installed instance counts it
    finally:
        outer.uninstall()
    assert inner.binding.owned_context is not None
    assert inner.binding.owned_context.get_snapshot().step_count == 3
    assert outer.binding.owned_context is not None
    assert outer.binding.owned_context.get_snapshot().step_count == 3  # model, tool, forced answer


def test_install_and_uninstall_restore_crewai() -> None:
    original = vars(ToolLoopLLM)["call"]
    hooks = VeronicaCrewAIHooks(config=limits(100))
    assert registered() == [False] * 4
    assert hooks.install() is hooks and hooks.installed
    assert registered() == [True] * 4
    assert vars(ToolLoopLLM)["call"] is not original  # wrapped while installed
    hooks.uninstall()
    assert not hooks.installed
    assert registered() == [False] * 4
    assert vars(ToolLoopLLM)["call"] is original
    crewed = Crewed(max_iter=1)
    crewed.crew.kickoff()  # uninstalled: nothing is counted any more
    assert crewed.counts() == [(2, 1)]
    assert hooks.binding.owned_context is None


def test_two_instances_share_one_registration() -> None:
    first, second = VeronicaCrewAIHooks().install(), VeronicaCrewAIHooks()
    with second:
        assert get_before_llm_call_hooks().count(adapter._before_llm) == 1
    assert registered() == [True] * 4  # the first one is still installed
    first.uninstall()
    assert registered() == [False] * 4


def test_an_agent_built_before_install_is_still_contained() -> None:
    crewed = Crewed(max_iter=1)
    crewed.crew.kickoff()  # builds the agent's executor, which snapshots the hook lists
    assert crewed.counts() == [(2, 1)]
    hooks = VeronicaCrewAIHooks(config=limits(2))
    with hooks, pytest.raises(ExecutionHalted, match="step_limit"):
        crewed.crew.kickoff()
    assert crewed.counts() == [(3, 2)]  # model, tool, then the forced final answer is refused
    ctx = hooks.binding.owned_context
    assert ctx is not None
    # Counted by the hooks (named after the agent), not only by the LLM wrapper ("direct").
    assert [n.name for n in ctx.graph.nodes()] == ["crewai.llm:researcher 0", "crewai.tool:lookup"]
