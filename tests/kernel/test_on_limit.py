"""on_limit=AskForMore: a context at its own cost or step limit asks before it halts."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from veronica_mw import (
    Approve,
    AskForMore,
    BudgetPool,
    Edit,
    ExecutionConfig,
    ExecutionContext,
    ExecutionHalted,
    Reject,
    WrapOptions,
)


def config(**overrides: Any) -> ExecutionConfig:
    return ExecutionConfig(**{"max_cost_usd": 1.0, "max_steps": 3, "max_retries_total": 0, **overrides})


class Approver:
    """Answers every request with ``answer`` (after ``delay_s``) and keeps what it was asked."""

    def __init__(self, answer: Any = None, delay_s: float = 0.0) -> None:
        self.answer = Approve() if answer is None else answer
        self.delay_s = delay_s
        self.requests: list[Any] = []

    def __call__(self, request: Any) -> Any:
        self.requests.append(request)
        if self.delay_s:
            time.sleep(self.delay_s)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def run_tools(ctx: ExecutionContext, n: int) -> tuple[int, ExecutionHalted | None]:
    """Make ``n`` tool calls; how many bodies ran, and the halt that stopped them."""
    ran = [0]

    def body() -> None:
        ran[0] += 1

    for _ in range(n):
        try:
            ctx.call_tool(body)
        except ExecutionHalted as halted:
            return ran[0], halted
    return ran[0], None


def priced(usd: float) -> WrapOptions:
    return WrapOptions(cost_estimate_hint=usd, cost_fn=lambda _result: usd)


def kinds(ctx: ExecutionContext) -> list[str]:
    return [e.kind for e in ctx.get_events() if e.kind.startswith("escalation")]


def test_approve_raises_the_step_limit_and_the_call_runs() -> None:
    approver = Approver()
    ctx = ExecutionContext(config(), on_limit=AskForMore(approver, add_steps=2))
    ran, halted = run_tools(ctx, 5)
    assert (ran, halted) == (5, None)
    assert len(approver.requests) == 1
    assert ctx.config.max_steps == 5 and ctx.get_snapshot().config.max_steps == 5
    assert kinds(ctx) == ["escalation_requested", "escalation_granted"]
    granted = [e for e in ctx.get_events() if e.kind == "escalation_granted"][0]
    assert granted.data["add_steps"] == 2 and granted.data["max_steps"] == 5
    # The request names the context, the limit reached, the usage and what would be added.
    request = approver.requests[0]
    assert request.chain_id == ctx.chain_id and request.tool == "raise max_steps"
    assert request.arguments["limit"] == "max_steps" and request.arguments["add_steps"] == 2
    assert request.arguments["limit_value"] == 3 and request.usage["steps_used"] == 3


def test_without_on_limit_the_limit_halts_as_before() -> None:
    ran, halted = run_tools(ExecutionContext(config()), 5)
    assert ran == 3 and halted is not None and halted.reason == "step_limit"


def test_partial_grant_by_edit_raises_the_cost_limit_by_less() -> None:
    approver = Approver(Edit({"add_usd": 0.3}, approver="alice"))
    ask = AskForMore(approver, add_usd=1.0, max_usd=1.1)
    ctx = ExecutionContext(config(max_cost_usd=0.5, max_steps=100), on_limit=ask)
    ran = 0
    with pytest.raises(ExecutionHalted) as info:
        for _ in range(20):
            ctx.call_llm(lambda: "ok", options=priced(0.25))
            ran += 1
    # 0.5: two calls; +0.3 (not the 0.6 offered): 0.8, one more; +0.3: 1.1 (the cap), one more.
    assert ran == 4
    assert ctx.config.max_cost_usd == pytest.approx(1.1)
    assert [r.arguments["add_usd"] for r in approver.requests] == [pytest.approx(0.6), pytest.approx(0.3)]
    assert info.value.reason == "budget_exceeded" and "no more may be added" in info.value.detail
    granted = [e for e in ctx.get_events() if e.kind == "escalation_granted"]
    assert [e.data["add_usd"] for e in granted] == [0.3, 0.3]
    assert "alice" in granted[0].detail


def test_an_edit_never_grants_more_than_offered() -> None:
    approver = Approver(Edit({"add_steps": 50}))
    ctx = ExecutionContext(config(), on_limit=AskForMore(approver, add_steps=2))
    ran, halted = run_tools(ctx, 5)
    assert ran == 5 and ctx.config.max_steps == 5


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (Reject("not today"), "rejected: not today"),
        (False, "rejected by the approver"),
        (RuntimeError("approver down"), "approver failed: RuntimeError: approver down"),
        ("yes please", "malformed answer 'yes please'"),
        (Edit({"add_steps": "many"}), "the edit gives no valid add_steps"),
    ],
    ids=["reject", "false", "error", "malformed", "bad-edit"],
)
def test_no_grant_is_the_ordinary_halt_with_the_decision_in_its_detail(answer: Any, says: str) -> None:
    approver = Approver(answer)
    ctx = ExecutionContext(config(), on_limit=AskForMore(approver, add_steps=2))
    ran, halted = run_tools(ctx, 5)
    assert ran == 3 and halted is not None and halted.reason == "step_limit"
    assert "max_steps=3 reached; asked for more:" in halted.detail and says in halted.detail
    assert ctx.config.max_steps == 3 and len(approver.requests) == 1
    assert kinds(ctx) == ["escalation_requested", "escalation_rejected"]


def test_no_decision_within_timeout_s_is_a_halt() -> None:
    approver = Approver(delay_s=2.0)
    ctx = ExecutionContext(config(), on_limit=AskForMore(approver, add_steps=2, timeout_s=0.2))
    started = time.monotonic()
    ran, halted = run_tools(ctx, 5)
    assert time.monotonic() - started < 1.5
    assert ran == 3 and halted is not None and halted.reason == "step_limit"
    assert "no decision in time" in halted.detail


def test_the_deadline_keeps_running_while_a_person_decides() -> None:
    approver = Approver(delay_s=2.0)
    ctx = ExecutionContext(config(timeout_ms=300), on_limit=AskForMore(approver, add_steps=2))
    with ctx:
        started = time.monotonic()
        ran, halted = run_tools(ctx, 5)
    assert time.monotonic() - started < 1.5
    assert ran == 3 and halted is not None and halted.reason == "timeout"


def test_async_approver_and_async_calls() -> None:
    requests: list[Any] = []

    async def approver(request: Any) -> Any:
        requests.append(request)
        await asyncio.sleep(0.01)
        return Approve()

    async def main() -> int:
        ctx = ExecutionContext(config(), on_limit=AskForMore(approver, add_steps=1))
        ran = 0
        for _ in range(4):
            await ctx.acall_tool(lambda: None)
            ran += 1
        return ran

    assert asyncio.run(main()) == 4 and len(requests) == 1


@pytest.mark.parametrize("dimension", ["usd", "steps"])
def test_max_usd_and_max_steps_cap_what_may_ever_be_granted(dimension: str) -> None:
    approver = Approver()
    if dimension == "steps":
        ctx = ExecutionContext(config(), on_limit=AskForMore(approver, add_steps=2, max_steps=4))
        ran, halted = run_tools(ctx, 10)
        assert ran == 4 and ctx.config.max_steps == 4  # +1, not +2: the cap
        assert approver.requests[0].arguments["add_steps"] == 1
    else:
        ctx = ExecutionContext(config(max_cost_usd=0.5, max_steps=100),
                               on_limit=AskForMore(approver, add_usd=1.0, max_usd=0.75))  # fmt: skip
        ran = 0
        with pytest.raises(ExecutionHalted) as info:
            for _ in range(10):
                ctx.call_llm(lambda: "ok", options=priced(0.25))
                ran += 1
        halted = info.value
        assert ran == 3 and ctx.config.max_cost_usd == 0.75
    # Once at the cap nobody is asked again: the halt says why.
    assert len(approver.requests) == 1
    assert halted is not None and "reached: no more may be added" in halted.detail


def test_a_limit_without_add_is_never_raised() -> None:
    approver = Approver()
    ctx = ExecutionContext(
        config(max_steps=100, max_cost_usd=0.2), on_limit=AskForMore(approver, add_steps=5)
    )
    with pytest.raises(ExecutionHalted, match="does not raise the cost limit"):
        for _ in range(3):
            ctx.call_llm(lambda: "ok", options=priced(0.15))
    assert approver.requests == []


def test_nested_the_level_whose_limit_is_reached_asks() -> None:
    approver = Approver()
    root = ExecutionContext(config(max_steps=3), on_limit=AskForMore(approver, add_steps=2), name="root")
    child = ExecutionContext(config(max_steps=100), parent=root, name="child")
    ran, halted = run_tools(child, 5)
    assert (ran, halted) == (5, None)
    assert len(approver.requests) == 1 and approver.requests[0].chain_id == root.chain_id
    assert approver.requests[0].arguments["context"] == "root"
    assert root.config.max_steps == 5 and child.config.max_steps == 100
    assert kinds(root) == ["escalation_requested", "escalation_granted"] and kinds(child) == []


def test_nested_a_child_without_on_limit_halts_at_its_own_limit() -> None:
    approver = Approver()
    root = ExecutionContext(config(max_steps=100), on_limit=AskForMore(approver, add_steps=2))
    child = root.child("sub", max_steps=2)  # children do not inherit on_limit
    ran, halted = run_tools(child, 5)
    assert ran == 2 and halted is not None and halted.reason == "step_limit"
    assert approver.requests == [] and not root.aborted


def test_a_tenant_pool_window_is_never_raised() -> None:
    approver = Approver()
    pool = BudgetPool(0.5, window_s=3600, key_func=str)
    ctx = ExecutionContext(
        config(max_cost_usd=10.0, max_steps=100), budget_parent=pool.ledger("acme"),
        on_limit=AskForMore(approver, add_usd=1.0),
    )  # fmt: skip
    ran = 0
    with pytest.raises(ExecutionHalted) as info:
        for _ in range(5):
            ctx.call_llm(lambda: "ok", options=priced(0.2))
            ran += 1
    assert ran == 2 and info.value.reason == "budget_exceeded" and approver.requests == []
    assert pool.usage("acme").spent_usd == pytest.approx(0.4)


def test_a_halt_or_a_policy_is_never_asked_about() -> None:
    approver = Approver()
    ctx = ExecutionContext(config(), on_limit=AskForMore(approver, add_steps=2))
    ctx.cancel("stop")
    ran, halted = run_tools(ctx, 2)
    assert ran == 0 and halted is not None and approver.requests == []


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"add_usd": 0}, {"add_steps": 1.5}, {"add_usd": float("nan")}, {"add_steps": 1, "timeout_s": 0},
     {"add_steps": True}, {"add_steps": 1, "max_usd": -1}],
    ids=["nothing", "zero", "float-steps", "nan", "timeout", "bool", "negative-cap"],
)  # fmt: skip
def test_bad_options_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        AskForMore(Approver(), **kwargs)


def test_bad_approver_and_bad_on_limit_are_type_errors() -> None:
    with pytest.raises(TypeError, match="approver"):
        AskForMore("alice", add_steps=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_limit"):
        ExecutionContext(config(), on_limit=lambda level: True)


# -- concurrency --------------------------------------------------------------------------------------


def test_16_threads_at_the_limit_make_one_ask_and_never_overshoot() -> None:
    approver = Approver(delay_s=0.2)  # slow: every thread reaches the limit while it decides
    ctx = ExecutionContext(config(max_steps=8), on_limit=AskForMore(approver, add_steps=8, max_steps=16))
    barrier = threading.Barrier(16)
    ran = [0]
    lock = threading.Lock()
    halts: list[str] = []

    def body() -> None:
        with lock:
            ran[0] += 1
        time.sleep(0.01)

    def worker() -> None:
        barrier.wait()
        while True:
            try:
                ctx.call_tool(body)
            except ExecutionHalted as halted:
                halts.append(halted.reason)
                return

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(approver.requests) == 1  # one ask for everyone who hit the limit meanwhile
    assert ran[0] == 16 and ctx.get_snapshot().step_count == 16  # exactly the raised limit
    assert halts == ["step_limit"] * 16


def test_200_tasks_at_the_limit_make_one_ask_and_never_overshoot() -> None:
    requests: list[Any] = []

    async def approver(request: Any) -> Any:
        requests.append(request)
        await asyncio.sleep(0.1)
        return Approve()

    async def main() -> tuple[int, int, list[str]]:
        ctx = ExecutionContext(config(max_steps=1000, max_cost_usd=1.0),
                               on_limit=AskForMore(approver, add_usd=1.0, max_usd=1.5))  # fmt: skip
        ran = 0
        halts: list[str] = []

        async def body() -> str:
            nonlocal ran
            ran += 1
            await asyncio.sleep(0)
            return "ok"

        async def task() -> None:
            try:
                await ctx.acall_llm(body, options=priced(0.01))
            except ExecutionHalted as halted:
                halts.append(halted.reason)

        await asyncio.gather(*(task() for _ in range(200)))
        assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(1.5)
        return ran, len(requests), halts

    ran, asked, halts = asyncio.run(main())
    # 100 fit under 1.0; the others wait for one ask, which raises it to 1.5 (the cap): 50 more run,
    # 50 halt -- none past the raised limit, and nobody is asked again at the cap.
    assert asked == 1 and ran == 150 and halts == ["budget_exceeded"] * 50


def test_sync_and_async_callers_share_one_ask() -> None:
    approver = Approver(delay_s=0.3)
    ctx = ExecutionContext(config(max_steps=2), on_limit=AskForMore(approver, add_steps=2, max_steps=4))
    run_tools(ctx, 2)
    outcomes: list[str] = []

    def sync_caller() -> None:
        try:
            ctx.call_tool(lambda: None)
            outcomes.append("ran")
        except ExecutionHalted:
            outcomes.append("halted")

    async def async_callers() -> None:
        async def one() -> None:
            try:
                await ctx.acall_tool(lambda: None)
                outcomes.append("ran")
            except ExecutionHalted:
                outcomes.append("halted")

        await asyncio.gather(one(), one())

    thread = threading.Thread(target=sync_caller)
    thread.start()
    asyncio.run(async_callers())
    thread.join(5)
    assert len(approver.requests) == 1
    assert sorted(outcomes) == ["halted", "ran", "ran"] and ctx.get_snapshot().step_count == 4


def test_an_adapters_owned_context_asks_too() -> None:
    # Every adapter that builds its own context from config= does it through ContextBinding.
    from veronica_mw import ContextBinding

    approver = Approver()
    binding = ContextBinding(config=config(), on_limit=AskForMore(approver, add_steps=2))
    owned = binding.resolve()
    assert owned is not None
    ran, halted = run_tools(owned, 5)
    assert (ran, halted) == (5, None) and len(approver.requests) == 1
