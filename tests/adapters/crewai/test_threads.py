"""Crews that other threads run inside their own ``ExecutionContext`` are counted there while any
hooks instance is active, also one only inside a ``with`` block of the main thread."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters.crewai import VeronicaCrewAIHooks

from .fakes import Crewed
from .test_isolation import run_in_threads

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai")


def limits(max_steps: int) -> ExecutionConfig:
    return ExecutionConfig(max_cost_usd=1.0, max_steps=max_steps, max_retries_total=3)


# 4 steps: model, tool, model, tool, then the 3rd model call is refused.
# 6 steps: model, tool, model, tool, model, tool, then the 4th model call is refused.
EXPECTED = {"a": ([(2, 2)], 4), "b": ([(3, 3)], 6)}


def crews_in_their_own_contexts(
    contexts: dict[str, ExecutionContext], crews: dict[str, Crewed]
) -> Callable[[str], Callable[[], None]]:
    def job(name: str) -> Callable[[], None]:
        def run() -> None:
            with contexts[name]:
                crews[name].crew.kickoff()

        return run

    return job


def test_a_with_block_in_the_main_thread_does_not_leave_other_threads_uncounted() -> None:
    barrier = threading.Barrier(2)  # both crews are inside their first model call at once
    contexts = {"a": ExecutionContext(limits(4)), "b": ExecutionContext(limits(6))}
    crews = {name: Crewed(barrier=barrier) for name in contexts}
    job = crews_in_their_own_contexts(contexts, crews)
    hooks = VeronicaCrewAIHooks()
    with hooks:
        errors = run_in_threads(job("a"), job("b"))
    for name, error in zip("ab", errors, strict=True):
        assert isinstance(error, ExecutionHalted) and error.reason == "step_limit"
        counts, steps = EXPECTED[name]
        assert crews[name].counts() == counts
        assert contexts[name].get_snapshot().step_count == steps
    assert hooks.binding.owned_context is None  # nothing was counted anywhere else


def test_the_blocks_own_context_and_the_threads_contexts_stay_apart() -> None:
    hooks = VeronicaCrewAIHooks(config=limits(100))
    contexts = {"a": ExecutionContext(limits(4))}
    crews = {"a": Crewed()}
    with hooks:
        mine = Crewed(max_iter=1)
        mine.crew.kickoff()  # in the block's thread: counted in the instance's own context
        errors = run_in_threads(crews_in_their_own_contexts(contexts, crews)("a"))
    assert isinstance(errors[0], ExecutionHalted)
    assert crews["a"].counts() == EXPECTED["a"][0]
    assert contexts["a"].get_snapshot().step_count == 4
    owned = hooks.binding.owned_context
    assert owned is not None and owned.get_snapshot().step_count == 3  # model, tool, forced answer


def test_a_crew_inside_a_child_context_is_counted_once_in_each_level() -> None:
    parent = ExecutionContext(limits(5), name="request")
    hooks = VeronicaCrewAIHooks(context=parent)  # explicit: the request's context
    crewed = Crewed()
    with hooks, parent.child("crew", max_steps=100) as child, pytest.raises(ExecutionHalted) as halted:
        crewed.crew.kickoff()
    assert halted.value.reason == "step_limit" and "ancestor 'request'" in halted.value.detail
    # 5 steps in all (model, tool, model, tool, model), each counted once in the parent.
    assert crewed.counts() == [(3, 2)]
    assert parent.get_snapshot().step_count == child.get_snapshot().step_count == 5
