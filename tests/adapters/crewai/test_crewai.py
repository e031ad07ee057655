"""A crew whose model keeps choosing a tool is stopped at the limit, before the next call runs."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from crewai.hooks import HookAborted

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted
from veronica_mw.adapters.crewai import CrewExecutionHalted, VeronicaCrewAIHooks

from .fakes import CALL_PRICE, Crewed

# CrewAI reads its own deprecated Agent fields (function_calling_llm, multimodal...) while validating.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai")


def limits(**kwargs: Any) -> ExecutionConfig:
    values: dict[str, Any] = {"max_cost_usd": 1.0, "max_steps": 100, "max_retries_total": 3}
    values.update(kwargs)
    return ExecutionConfig(**values)


def owned(hooks: VeronicaCrewAIHooks) -> ExecutionContext:
    ctx = hooks.context
    assert ctx is not None
    return ctx


@pytest.mark.parametrize("native", [False, True], ids=["react-text", "native-tools"])
@pytest.mark.parametrize(
    ("max_steps", "counts", "stopped_in"),
    [
        # model, tool, model, tool, model = 5 steps; the third tool call is refused -> the crew stops.
        (5, [(3, 2), (0, 0)], "tool"),
        # the third model call is refused before it runs.
        (4, [(2, 2), (0, 0)], "llm"),
    ],
)
def test_tool_loop_stops_the_crew_at_max_steps(
    native: bool, max_steps: int, counts: list[tuple[int, int]], stopped_in: str
) -> None:
    hooks = VeronicaCrewAIHooks(config=limits(max_steps=max_steps))
    crewed = Crewed(tasks=2, native=native, observe=lambda: hooks.context)
    with hooks, pytest.raises(ExecutionHalted) as caught:
        crewed.crew.kickoff()
    halted = caught.value
    assert isinstance(halted, CrewExecutionHalted) and isinstance(halted, HookAborted)
    assert halted.reason == "step_limit"
    # The second task never started: a halt stops the whole crew, not one call.
    assert crewed.counts() == counts
    # Each model call saw its own step already counted when its body ran (1, 3, 5).
    assert crewed.llm.steps_seen == [1, 3, 5][: counts[0][0]]
    snap = owned(hooks).get_snapshot()
    assert (snap.step_count, snap.in_flight, snap.abort_reason) == (max_steps, 0, "step_limit")
    kinds = [node.kind for node in owned(hooks).graph.nodes()]
    assert kinds == ["llm", "tool"] * (max_steps // 2) + ["llm"] * (max_steps % 2)
    assert halted.snapshot is not None and halted.snapshot.step_count == max_steps
    del stopped_in  # documents where the limit hit; the counts above prove it


def test_forced_final_answer_at_max_iter_is_counted() -> None:
    hooks = VeronicaCrewAIHooks(config=limits())
    crewed = Crewed(max_iter=2, observe=lambda: hooks.context)
    with hooks:
        crewed.crew.kickoff()  # the crew finishes with the forced final answer
    assert crewed.counts() == [(3, 2)]
    assert crewed.llm.steps_seen == [1, 3, 5]
    names = [node.name for node in owned(hooks).graph.nodes()]
    assert names[-1] == "crewai.llm:direct"  # the call no CrewAI hook sees
    assert owned(hooks).get_snapshot().step_count == 5


def test_forced_final_answer_is_refused_at_the_limit() -> None:
    hooks = VeronicaCrewAIHooks(config=limits(max_steps=4))
    crewed = Crewed(max_iter=2)
    with hooks, pytest.raises(ExecutionHalted, match="step_limit"):
        crewed.crew.kickoff()
    assert crewed.counts() == [(2, 2)]  # the forced call never ran


def test_cost_is_committed_from_the_model_usage() -> None:
    hooks = VeronicaCrewAIHooks(config=limits())
    crewed = Crewed(max_iter=2)
    with hooks:
        crewed.crew.kickoff()
    snap = owned(hooks).get_snapshot()
    assert snap.cost_usd_accumulated == pytest.approx(3 * CALL_PRICE)
    llm_nodes = [node for node in owned(hooks).graph.nodes() if node.kind == "llm"]
    assert [(n.tokens_in, n.tokens_out, n.model) for n in llm_nodes] == [(1000, 100, "gpt-4o-mini")] * 3


def test_litellm_style_model_names_are_priced() -> None:
    hooks = VeronicaCrewAIHooks(config=limits())
    crewed = Crewed(max_iter=1)
    crewed.llm.model = "openai/gpt-4o-mini"
    with hooks:
        crewed.crew.kickoff()
    assert owned(hooks).get_snapshot().cost_usd_accumulated == pytest.approx(2 * CALL_PRICE)


def test_usage_reported_in_parts_and_anthropic_keys_is_summed_per_call() -> None:
    parts = [{"input_tokens": 600, "output_tokens": 40}, {"input_tokens": 400, "output_tokens": 60}]
    hooks = VeronicaCrewAIHooks(config=limits())
    crewed = Crewed(max_iter=1, usage=parts)
    with hooks:
        crewed.crew.kickoff()
    llm_nodes = [node for node in owned(hooks).graph.nodes() if node.kind == "llm"]
    assert [(n.tokens_in, n.tokens_out) for n in llm_nodes] == [(1000, 100)] * 2
    assert owned(hooks).get_snapshot().cost_usd_accumulated == pytest.approx(2 * CALL_PRICE)


def test_without_usage_the_cost_hint_is_kept() -> None:
    hooks = VeronicaCrewAIHooks(config=limits(max_cost_usd=0.25), llm_cost_hint=0.1, tool_cost_hint=0.01)
    crewed = Crewed(usage=[])
    with hooks, pytest.raises(ExecutionHalted) as caught:
        crewed.crew.kickoff()
    # 0.1 + 0.01 + 0.1 + 0.01 = 0.22: a third model call would reserve 0.1 more than is left.
    assert caught.value.reason == "budget_exceeded"
    assert crewed.counts() == [(2, 2)]
    assert owned(hooks).get_snapshot().cost_usd_accumulated == pytest.approx(0.22)


def test_budget_halts_after_the_call_that_crossed_it() -> None:
    # llm_cost_hint=0: nothing reserved before a call, so only its actual cost can cross the ceiling
    hooks = VeronicaCrewAIHooks(config=limits(max_cost_usd=2.5 * CALL_PRICE), llm_cost_hint=0.0)
    crewed = Crewed(tasks=2)
    with hooks, pytest.raises(ExecutionHalted) as caught:
        crewed.crew.kickoff()
    assert caught.value.reason == "budget_exceeded"
    # The third call's actual cost crossed the ceiling: its tool never ran, nothing else did.
    assert crewed.counts() == [(3, 2), (0, 0)]
    assert owned(hooks).get_snapshot().cost_usd_accumulated == pytest.approx(3 * CALL_PRICE)


def test_by_default_a_call_whose_worst_case_could_cross_the_budget_is_refused() -> None:
    # Each model call reserves its worst case (prompt + 4096 output tokens at the model's price),
    # far above 2.5 calls' real cost: the first call is refused before it runs.
    hooks = VeronicaCrewAIHooks(config=limits(max_cost_usd=2.5 * CALL_PRICE))
    crewed = Crewed(tasks=2)
    with hooks, pytest.raises(ExecutionHalted) as caught:
        crewed.crew.kickoff()
    assert caught.value.reason == "budget_exceeded"
    assert crewed.counts() == [(0, 0), (0, 0)]
    assert owned(hooks).get_snapshot().cost_usd_accumulated == 0.0


def test_a_failing_model_draws_from_the_retry_budget() -> None:
    hooks = VeronicaCrewAIHooks(config=limits(max_retries_total=1))
    crewed = Crewed(fail_with="provider down")
    with hooks, pytest.raises(ExecutionHalted) as caught:
        crewed.crew.kickoff()  # CrewAI retries the task (max_retry_limit=2); the kernel stops it
    assert caught.value.reason == "retry_limit"
    assert crewed.counts() == [(2, 0)]
    assert owned(hooks).get_snapshot().retries_used == 1


@pytest.mark.anyio
@pytest.mark.parametrize("native", [False, True], ids=["react-text", "native-tools"])
async def test_akickoff_stops_at_max_steps(native: bool) -> None:
    hooks = VeronicaCrewAIHooks(config=limits(max_steps=5))
    crewed = Crewed(tasks=2, native=native, observe=lambda: hooks.context)
    with hooks:
        with pytest.raises(ExecutionHalted, match="step_limit"):
            await crewed.crew.akickoff()
    # CrewAI 1.15's executor runs ``llm.call`` in worker threads even under akickoff.
    assert crewed.counts() == [(3, 2), (0, 0)]
    assert crewed.llm.steps_seen == [1, 3, 5]


@pytest.mark.anyio
async def test_direct_async_model_calls_are_counted_and_refused() -> None:
    """``acall`` outside any agent (CrewAI's async output converter, user code): no hook sees it."""
    hooks = VeronicaCrewAIHooks(config=limits(max_steps=2))
    llm = Crewed(observe=lambda: hooks.context).llm
    with hooks:
        await llm.acall("hi")
        llm.call("hi")
        with pytest.raises(ExecutionHalted, match="step_limit"):
            await llm.acall("hi")
    assert (llm.acalls, llm.calls, llm.steps_seen) == (1, 1, [1, 2])
    assert owned(hooks).get_snapshot().cost_usd_accumulated == pytest.approx(2 * CALL_PRICE)


def test_a_standalone_agent_kickoff_is_contained_too() -> None:
    hooks = VeronicaCrewAIHooks(config=limits(max_steps=5))
    crewed = Crewed()
    with hooks, pytest.raises(ExecutionHalted, match="step_limit"):
        crewed.agents[0].kickoff("find facts")  # no crew, no task: the same hooks apply
    assert crewed.counts() == [(3, 2)]
    assert owned(hooks).get_snapshot().step_count == 5


def test_explicit_context_wins_and_is_shared_by_several_crews() -> None:
    ctx = ExecutionContext(limits(max_steps=7))
    first, second = Crewed(max_iter=2), Crewed()
    with VeronicaCrewAIHooks(ctx):
        first.crew.kickoff()  # 5 steps
        with pytest.raises(ExecutionHalted, match="step_limit"):
            second.crew.kickoff()  # model, tool, then the model call is refused
    assert (first.counts(), second.counts()) == ([(3, 2)], [(1, 1)])
    assert ctx.get_snapshot().step_count == 7


def test_current_context_is_used_when_none_is_given() -> None:
    crewed = Crewed()
    with ExecutionContext(limits(max_steps=3)) as ctx, VeronicaCrewAIHooks():
        with pytest.raises(ExecutionHalted, match="step_limit"):
            crewed.crew.kickoff()
    assert crewed.counts() == [(2, 1)]
    assert ctx.get_snapshot().step_count == 3


def test_without_any_context_the_crew_runs_uncontained() -> None:
    crewed = Crewed(max_iter=2)
    with VeronicaCrewAIHooks() as hooks:
        crewed.crew.kickoff()
        assert hooks.context is None
    assert crewed.counts() == [(3, 2)]


def test_a_halted_context_refuses_the_next_crew_before_any_call() -> None:
    ctx = ExecutionContext(limits())
    ctx.cancel("client went away")
    crewed = Crewed()
    with VeronicaCrewAIHooks(ctx), pytest.raises(ExecutionHalted, match="cancelled"):
        crewed.crew.kickoff()
    assert crewed.counts() == [(0, 0)]


def test_reset_starts_a_fresh_owned_context() -> None:
    hooks = VeronicaCrewAIHooks(config=limits(max_steps=3))
    with hooks:
        with pytest.raises(ExecutionHalted):
            Crewed().crew.kickoff()
        hooks.reset()
        crewed = Crewed()
        with pytest.raises(ExecutionHalted, match="step_limit"):
            crewed.crew.kickoff()
    assert crewed.counts() == [(2, 1)]


def test_no_network_is_attempted_with_telemetry_off() -> None:
    """Telemetry is off (conftest, before crewai is imported): a whole run opens no socket."""
    from crewai.events.event_bus import crewai_event_bus

    attempts: list[tuple[str, Any]] = []
    _AUDIT.append(attempts)
    try:
        with VeronicaCrewAIHooks(config=limits(max_steps=5)), pytest.raises(ExecutionHalted):
            Crewed(tasks=2).crew.kickoff()
        crewai_event_bus.flush()  # handlers run in the bus's threads: let them finish first
    finally:
        _AUDIT.remove(attempts)
    assert attempts == []


_AUDIT: list[list[tuple[str, Any]]] = []
_LOCAL = ("127.0.0.1", "::1", "localhost")


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _AUDIT or event not in ("socket.connect", "socket.getaddrinfo", "socket.sendto"):
        return
    target = args[0] if event == "socket.getaddrinfo" else args[-1]
    host = target[0] if isinstance(target, tuple) and target else target
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if not (isinstance(host, str) and (host in _LOCAL or host.startswith("/"))):  # "/": AF_UNIX path
        for attempts in _AUDIT:
            attempts.append((event, target))


sys.addaudithook(_audit)  # audit hooks cannot be removed: inert while _AUDIT is empty
