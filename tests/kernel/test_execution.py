from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from typing import Any

import pytest

from veronica_mw import (
    CircuitBreaker,
    ContextBinding,
    Decision,
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    PolicyContext,
    PolicyDecision,
    PolicyPipeline,
    TokenUsage,
    WrapOptions,
    get_current_execution_context,
)


def cfg(**overrides: Any) -> ExecutionConfig:
    values: dict[str, Any] = {"max_cost_usd": 10.0, "max_steps": 100, "max_retries_total": 10}
    values.update(overrides)
    return ExecutionConfig(**values)


def test_enter_sets_and_exit_restores_current_context() -> None:
    outer, inner = ExecutionContext(cfg()), ExecutionContext(cfg())
    assert get_current_execution_context() is None
    with outer:
        assert get_current_execution_context() is outer
        with inner:
            assert get_current_execution_context() is inner
        assert get_current_execution_context() is outer
    assert get_current_execution_context() is None


@pytest.mark.anyio
async def test_async_with_sets_context_for_the_task_only() -> None:
    seen: list[Any] = []

    async def other_task() -> None:
        seen.append(get_current_execution_context())

    async with ExecutionContext(cfg()) as ctx:
        assert get_current_execution_context() is ctx
        task = asyncio.ensure_future(other_task())  # copies the current context
        await task
    assert seen == [ctx]
    assert get_current_execution_context() is None


def test_never_entered_context_is_fully_usable() -> None:
    ctx = ExecutionContext(cfg(max_steps=2))
    assert ctx.call_tool(lambda a, b: a + b, 1, 2) == 3
    assert ctx.get_partial_result() == 3
    assert ctx.wrap_llm_call(lambda: "draft") is Decision.ALLOW
    assert ctx.get_partial_result() == "draft"
    assert ctx.wrap_llm_call(lambda: "x") is Decision.HALT
    assert get_current_execution_context() is None


def test_snapshot_fields_and_unique_chain_ids() -> None:
    ctx = ExecutionContext(cfg())
    ctx.wrap_llm_call(lambda: None, WrapOptions(cost_fn=lambda _: 0.25))
    snap = ctx.get_snapshot()
    assert snap.step_count == 1
    assert snap.cost_usd_accumulated == pytest.approx(0.25)
    assert snap.retries_used == 0
    assert snap.aborted is False and snap.abort_reason is None
    assert snap.elapsed_ms >= 0
    ids = {ExecutionContext(cfg()).chain_id for _ in range(1000)}
    assert len(ids) == 1000 and snap.chain_id not in ids
    assert snap.as_dict()["limits"]["max_steps"] == 100


def test_exception_propagates_unchanged_and_is_recorded() -> None:
    ctx = ExecutionContext(cfg())
    error = ValueError("boom")

    def fail() -> None:
        raise error

    with pytest.raises(ValueError) as info:
        ctx.wrap_llm_call(fail)
    assert info.value is error
    snap = ctx.get_snapshot()
    assert snap.retries_used == 1 and snap.step_count == 1 and not snap.aborted
    assert [n.status for n in ctx.graph.nodes()] == ["error"]


def test_cancel_halts_with_reason_and_logs_detail(caplog: pytest.LogCaptureFixture) -> None:
    ctx = ExecutionContext(cfg())
    with caplog.at_level(logging.INFO, logger="veronica_mw"):
        ctx.cancel("user pressed stop")
    assert "user pressed stop" in caplog.text
    with pytest.raises(ExecutionHalted) as info:
        ctx.call_llm(lambda: pytest.fail("must not run"))
    assert info.value.reason == "cancelled"
    assert info.value.snapshot is not None and info.value.snapshot.aborted


def test_halted_exception_is_runtime_error_with_partial_result() -> None:
    ctx = ExecutionContext(cfg(max_steps=1))
    ctx.call_llm(lambda: "first answer")
    with pytest.raises(RuntimeError) as info:
        ctx.call_llm(lambda: "second")
    halted = info.value
    assert isinstance(halted, ExecutionHalted)
    assert halted.reason == "step_limit" and halted.partial_result == "first answer"


@pytest.mark.anyio
async def test_async_forms_really_await() -> None:
    ctx = ExecutionContext(cfg(max_steps=3))
    awaited = []

    async def model() -> str:
        await asyncio.sleep(0)
        awaited.append(1)
        return "async result"

    assert await ctx.awrap_llm_call(model) is Decision.ALLOW
    assert ctx.get_partial_result() == "async result"
    assert await ctx.acall_tool(lambda: model()) == "async result"  # returns an awaitable
    assert await ctx.acall_llm(lambda x: x * 2, 21) == 42  # plain sync fn is fine too
    assert awaited == [1, 1]
    with pytest.raises(ExecutionHalted):
        await ctx.acall_llm(model)
    assert await ctx.awrap_tool_call(model) is Decision.HALT


@pytest.mark.anyio
async def test_cancelled_task_keeps_reservation_as_spent() -> None:
    ctx = ExecutionContext(cfg(max_cost_usd=1.0))

    async def slow() -> None:
        await asyncio.sleep(10)

    task = asyncio.ensure_future(ctx.awrap_llm_call(slow, WrapOptions(cost_estimate_hint=0.4)))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    snap = ctx.get_snapshot()
    assert snap.cost_usd_accumulated == pytest.approx(0.4) and snap.in_flight == 0


def test_two_phase_commit_fail_release_and_idempotence() -> None:
    ctx = ExecutionContext(cfg(max_steps=3, max_cost_usd=1.0))
    node = ctx.begin_call("llm", WrapOptions(cost_estimate_hint=0.5, operation_name="chat"))
    assert ctx.get_snapshot().cost_usd_reserved == pytest.approx(0.5)
    assert node.commit(cost_usd=0.2) is Decision.ALLOW
    assert node.commit(cost_usd=0.9) is Decision.ALLOW  # second settle is a no-op
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(0.2)
    released = ctx.begin_call("tool")
    released.release()
    assert ctx.get_snapshot().step_count == 1  # never ran: step given back
    failed = ctx.begin_call("tool")
    failed.fail(RuntimeError("x"))
    failed.commit(cost_usd=0.5)
    snap = ctx.get_snapshot()
    assert (snap.step_count, snap.retries_used) == (2, 1)
    assert snap.cost_usd_accumulated == pytest.approx(0.2)
    with pytest.raises(ValueError, match="kind"):
        ctx.begin_call("agent")


def test_begin_call_key_dedupes_one_call_seen_by_two_hooks() -> None:
    ctx = ExecutionContext(cfg(max_steps=1))
    first = ctx.begin_call("llm", key="run-1")
    second = ctx.begin_call("llm", key="run-1")
    assert first is second
    first.commit()
    second.commit()
    assert ctx.get_snapshot().step_count == 1
    with pytest.raises(ExecutionHalted):
        ctx.begin_call("llm", key="run-2")


def test_usage_priced_from_result_and_explicit_usage() -> None:
    ctx = ExecutionContext(cfg())
    response = {"model": "gpt-4o", "usage": {"prompt_tokens": 1000, "completion_tokens": 500}}
    ctx.wrap_llm_call(lambda: response)
    # gpt-4o: $2.50 / M input, $10 / M output
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(0.0025 + 0.005)
    node = ctx.begin_call("llm")
    node.commit(usage=TokenUsage(input_tokens=1000, output_tokens=500), model="gpt-4o")
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(2 * 0.0075)
    assert (node.tokens_in, node.tokens_out, node.model) == (1000, 500, "gpt-4o")


def test_unknown_model_is_never_priced_at_zero() -> None:
    ctx = ExecutionContext(cfg())
    response = {"model": "my-private-model-7", "usage": {"input_tokens": 10, "output_tokens": 10}}
    ctx.wrap_llm_call(lambda: response, WrapOptions(cost_estimate_hint=0.05))
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(0.05)
    events = [e for e in ctx.get_events() if e.kind == "unpriced"]
    assert len(events) == 1 and "my-private-model-7" in events[0].detail


def test_failing_cost_fn_keeps_reservation() -> None:
    ctx = ExecutionContext(cfg())
    ctx.wrap_llm_call(lambda: 1, WrapOptions(cost_estimate_hint=0.1, cost_fn=lambda _: 1 / 0))
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(0.1)
    assert [e.kind for e in ctx.get_events()] == ["cost_fn_failed"]
    ctx.wrap_llm_call(lambda: 1, WrapOptions(cost_estimate_hint=0.1, cost_fn=lambda _: float("nan")))
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(0.2)


def test_pipeline_denial_is_policy_denied_halt() -> None:
    class NoToolsAfterTwo:
        policy_type = "custom"

        def check(self, context: PolicyContext) -> PolicyDecision:
            if context.kind == "tool" and context.step_count >= 2:
                return PolicyDecision(False, "custom", reason="enough tools")
            return PolicyDecision(True, "custom")

        def reset(self) -> None:
            pass

    ctx = ExecutionContext(cfg(), pipeline=PolicyPipeline([NoToolsAfterTwo()]))
    assert ctx.wrap_tool_call(lambda: 1) is Decision.ALLOW
    assert ctx.wrap_llm_call(lambda: 1) is Decision.ALLOW
    with pytest.raises(ExecutionHalted) as info:
        ctx.call_tool(lambda: 1)
    assert info.value.reason == "policy_denied" and "enough tools" in info.value.detail


def test_breaker_is_fed_outcomes_and_probe_released_when_call_refused() -> None:
    now = [0.0]
    breaker = CircuitBreaker(failure_threshold=1, recovery_timeout=1.0, clock=lambda: now[0])
    ctx = ExecutionContext(cfg(), circuit_breaker=breaker)
    with pytest.raises(OSError):
        ctx.call_llm(_raise, OSError("down"))
    assert _state(breaker) == "open"
    now[0] = 2.0
    probe_ctx = ExecutionContext(cfg(), circuit_breaker=breaker)
    assert probe_ctx.call_llm(lambda: "ok") == "ok"
    assert _state(breaker) == "closed"


def test_binding_rule_explicit_then_current_then_owned() -> None:
    explicit = ExecutionContext(cfg())
    assert ContextBinding(explicit, cfg()).resolve() is explicit
    assert ContextBinding().resolve() is None
    binding = ContextBinding(config=cfg(max_steps=2))
    owned = binding.resolve()
    assert owned is not None and binding.resolve() is owned
    with ExecutionContext(cfg()) as current:
        assert binding.resolve() is current
    with pytest.raises(TypeError):
        ContextBinding(config={"max_steps": 1})  # type: ignore[arg-type]


def test_threads_started_with_copied_context_see_it() -> None:
    seen = []
    with ExecutionContext(cfg()) as ctx:
        run = contextvars.copy_context().run
        t = threading.Thread(target=lambda: run(lambda: seen.append(get_current_execution_context())))
        t.start()
        t.join()
    assert seen == [ctx]


def test_divergence_reported_and_halts_only_when_configured() -> None:
    ctx = ExecutionContext(cfg(), divergence_threshold=5)
    for _ in range(7):
        ctx.wrap_tool_call(lambda: None, WrapOptions(operation_name="search"))
    assert [e.kind for e in ctx.get_events()] == ["divergence"]
    assert not ctx.aborted
    strict = ExecutionContext(cfg(), divergence_threshold=3, halt_on_divergence=True)
    ran = []
    for _ in range(5):
        strict.wrap_tool_call(lambda: ran.append(1), WrapOptions(operation_name="search"))
    assert len(ran) == 2 and strict.abort_reason == "policy_denied"


def _raise(exc: BaseException) -> None:
    raise exc


def _state(breaker: CircuitBreaker) -> str:
    return breaker.state.value


def test_pending_context_is_built_once_on_first_use() -> None:
    from veronica_mw.kernel.context import PendingContext, current_context

    built: list[ExecutionContext] = []

    def factory() -> ExecutionContext:
        built.append(ExecutionContext(cfg(max_steps=1)))
        return built[-1]

    pending = PendingContext(factory)
    token = current_context.set(pending)
    try:
        assert built == [] and pending.ctx is None
        seen: list[Any] = []
        run = contextvars.copy_context().run
        threads = [
            threading.Thread(target=lambda: run(lambda: seen.append(get_current_execution_context())))
            for _ in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(built) == 1 and seen == [built[0]] * 8
        assert ContextBinding().resolve() is built[0]
    finally:
        current_context.reset(token)
    assert get_current_execution_context() is None


def test_arm_counts_the_deadline_from_the_given_start() -> None:
    import time

    ctx = ExecutionContext(cfg(timeout_ms=50))
    ctx.arm(started=time.monotonic() - 1.0)  # the request began a second ago
    assert ctx.wrap_llm_call(lambda: None) is Decision.HALT
    assert ctx.abort_reason == "timeout"
    ctx.disarm()
    fresh = ExecutionContext(cfg(timeout_ms=60_000)).arm()
    assert fresh.wrap_llm_call(lambda: None) is Decision.ALLOW
    fresh.disarm()
    fresh.disarm()  # idempotent


def test_cancellation_token_created_late_still_reports_and_cancelling_it_halts() -> None:
    ctx = ExecutionContext(cfg(max_steps=0))
    assert ctx.wrap_tool_call(lambda: None) is Decision.HALT
    assert ctx.cancellation_token.reason == "step_limit"  # built after the halt, already cancelled
    other = ExecutionContext(cfg())
    other.cancellation_token.cancel("cancelled", "from outside")
    assert other.abort_reason == "cancelled"
    assert other.wrap_tool_call(lambda: None) is Decision.HALT


class _UnavailableParent:
    """A budget parent whose store is down and fails closed (our own interface)."""

    refusal_status = 503
    refusal_detail = "budget backend unavailable"

    def reserve(self, amount_usd: float) -> bool:
        return False

    def settle(self, reserved_usd: float, actual_usd: float) -> None:
        raise AssertionError("nothing was reserved")

    def retry_after_s(self) -> float | None:
        return 2.0


def test_unavailable_parent_halts_with_policy_denied_and_a_503_hint() -> None:
    ctx = ExecutionContext(cfg(), budget_parent=_UnavailableParent())
    with pytest.raises(ExecutionHalted) as info:
        ctx.call_llm(lambda: pytest.fail("must not run"))
    snap = info.value.snapshot
    assert snap is not None
    assert (info.value.reason, snap.http_status, info.value.retry_after_s) == ("policy_denied", 503, 2.0)
    assert "unavailable" in info.value.detail and snap.step_count == 0
    plain = ExecutionContext(cfg(max_steps=0))
    with pytest.raises(ExecutionHalted) as limit:
        plain.call_llm(lambda: None)
    assert limit.value.snapshot is not None and limit.value.snapshot.http_status == 429
