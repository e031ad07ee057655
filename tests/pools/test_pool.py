"""BudgetPool with the in-process backend: admission, windows, Retry-After, RateLimit headers,
steps, hierarchical limits through the kernel, and bad input."""

from __future__ import annotations

import logging
import math
import threading
from datetime import datetime, timezone
from typing import Any

import pytest

from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted, WrapOptions
from veronica_mw.pools.budget_pool import Admission, BudgetPool, LocalBudgetBackend, TenantLedger

CONFIG = ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def header_key(scope: dict[str, Any]) -> str | None:
    return dict(scope.get("headers", [])).get(b"x-api-key", b"").decode() or None


def spend(ledger: TenantLedger | None, cost: float, hint: float | None = None) -> str:
    ctx = ExecutionContext(CONFIG, budget_parent=ledger)
    try:
        with ctx:
            ctx.call_llm(
                lambda: "ok",
                options=WrapOptions(
                    cost_estimate_hint=cost if hint is None else hint, cost_fn=lambda r: cost
                ),
            )
    except ExecutionHalted as exc:
        return exc.reason
    return "ok"


def test_admission_lifecycle_and_retry_after() -> None:
    clock = Clock(1_000_000.0 + 20.0)  # 20 s into a 60 s window (window boundaries are epoch-aligned)
    pool = BudgetPool(0.10, window_s=60, key_func=header_key, clock=clock)
    scope = {"headers": [(b"x-api-key", b"acme")]}
    assert pool.admit({"headers": []}) == Admission(True)  # no tenant: not pooled, no ledger
    for _ in range(3):
        adm = pool.admit(scope)
        assert adm.allowed and adm.ledger is not None
        assert spend(adm.ledger, 0.03) == "ok"
    adm = pool.admit(scope)
    assert adm.allowed  # $0.01 left: admitted, but a $0.03 call does not fit
    assert spend(adm.ledger, 0.03) == "budget_exceeded"
    assert spend(pool.admit(scope).ledger, 0.01) == "ok"  # a fresh request may still use the last cent
    refused = pool.admit(scope)
    window_end = math.floor(clock.now / 60) * 60 + 60
    assert (refused.allowed, refused.status, refused.reason) == (False, 429, "budget_exceeded")
    assert refused.retry_after_s == pytest.approx(window_end - clock.now)
    assert refused.ledger is None
    clock.now = window_end + 0.001  # the window resets: served again
    assert pool.admit(scope).allowed
    assert pool.usage("acme").spent_usd == 0.0


def test_halt_carries_the_pool_retry_after() -> None:
    clock = Clock(3600.0 * 1000 + 100.0)
    pool = BudgetPool(0.05, window_s="hour", key_func=str, clock=clock)
    ctx = ExecutionContext(CONFIG, budget_parent=pool.ledger("t"))
    with pytest.raises(ExecutionHalted) as info, ctx:
        ctx.call_llm(lambda: "x", options=WrapOptions(cost_estimate_hint=0.06))
    assert info.value.reason == "budget_exceeded"
    assert info.value.retry_after_s == pytest.approx(3500.0)  # seconds to the next hour


def test_calendar_month_windows_in_utc() -> None:
    clock = Clock(datetime(2024, 2, 29, 23, 0, tzinfo=timezone.utc).timestamp())
    pool = BudgetPool(0.02, window_s="month", key_func=str, clock=clock, rate_limit_headers=True)
    assert spend(pool.ledger("t"), 0.02) == "ok"
    refused = pool.admit("t")
    assert refused.status == 429 and refused.retry_after_s == pytest.approx(3600.0)
    assert ("RateLimit-Policy", f'"usd";q=20000;w={29 * 86400};qu="usd-micros"') in refused.headers
    assert ("RateLimit", '"usd";r=0;t=3600') in refused.headers
    clock.now = datetime(2024, 3, 1, 0, 0, 1, tzinfo=timezone.utc).timestamp()
    assert pool.admit("t").allowed
    clock.now = datetime(2024, 12, 31, 12, tzinfo=timezone.utc).timestamp()  # December -> January
    assert spend(pool.ledger("t"), 0.02) == "ok"
    assert pool.admit("t").retry_after_s == pytest.approx(12 * 3600.0)


def test_rate_limit_headers_and_step_limit() -> None:
    clock = Clock(120.0)
    pool = BudgetPool(1.0, window_s=60, key_func=str, limit_steps=2, rate_limit_headers=True, clock=clock)
    first = pool.admit("t")
    assert first.headers == [
        ("RateLimit-Policy", '"usd";q=1000000;w=60;qu="usd-micros", "steps";q=2;w=60'),
        ("RateLimit", '"usd";r=1000000;t=60, "steps";r=2;t=60'),
    ]
    assert spend(first.ledger, 0.25) == "ok"
    assert pool.admit("t").headers[1] == ("RateLimit", '"usd";r=750000;t=60, "steps";r=1;t=60')
    ctx = ExecutionContext(CONFIG, budget_parent=pool.ledger("t"))
    with ctx:
        ctx.call_tool(lambda: "free tool call")  # tool calls are steps too (reserve(0))
        with pytest.raises(ExecutionHalted) as info:
            ctx.call_tool(lambda: "one too many")
    assert info.value.reason == "budget_exceeded"
    refused = pool.admit("t")
    assert (refused.status, refused.reason, refused.retry_after_s) == (429, "step_limit", 60.0)
    assert BudgetPool(1.0, window_s=60, key_func=str).admit("t").headers == []  # headers are opt-in


def test_child_never_spends_more_than_the_parent_has_left() -> None:
    pool = BudgetPool(0.10, window_s=60, key_func=str)
    assert spend(pool.ledger("t"), 0.07) == "ok"
    ctx = ExecutionContext(
        ExecutionConfig(max_cost_usd=5.0, max_steps=10, max_retries_total=0), budget_parent=pool.ledger("t")
    )
    with ctx:
        ctx.call_llm(lambda: "a", options=WrapOptions(cost_estimate_hint=0.02, cost_fn=lambda r: 0.02))
        with pytest.raises(ExecutionHalted):
            ctx.call_llm(lambda: "b", options=WrapOptions(cost_estimate_hint=0.02))
    assert ctx.get_snapshot().cost_usd_accumulated == pytest.approx(0.02)
    assert pool.usage("t").spent_usd == pytest.approx(0.09)
    # ... and the parent never lets a child past the child's own limit either.
    small = ExecutionContext(
        ExecutionConfig(max_cost_usd=0.005, max_steps=10, max_retries_total=0), budget_parent=pool.ledger("u")
    )
    with small, pytest.raises(ExecutionHalted):
        small.call_llm(lambda: "c", options=WrapOptions(cost_estimate_hint=0.01))
    assert pool.usage("u").reserved_usd == 0.0 and pool.usage("u").steps == 0


def test_release_failure_and_interrupt_settle_correctly() -> None:
    pool = BudgetPool(1.0, window_s=60, key_func=str)
    ctx = ExecutionContext(ExecutionConfig(1.0, 10, 5), budget_parent=pool.ledger("t"))
    with ctx:
        ctx.begin_call("llm", WrapOptions(cost_estimate_hint=0.2)).release()  # never ran
        node = ctx.begin_call("llm", WrapOptions(cost_estimate_hint=0.2))
        node.fail(RuntimeError("upstream 500"))  # ran and failed: nothing billed
        ctx.begin_call("llm", WrapOptions(cost_estimate_hint=0.2)).commit(cost_usd=0.15)
    usage = pool.usage("t")
    assert usage.spent_usd == pytest.approx(0.15) and usage.reserved_usd == 0.0
    assert usage.steps == 3  # pool steps count calls started (the kernel does not say which never ran)


def test_parallel_calls_in_one_context_settle_their_own_amounts() -> None:
    pool = BudgetPool(1.0, window_s=60, key_func=str)
    ctx = ExecutionContext(ExecutionConfig(1.0, 100, 0), budget_parent=pool.ledger("t"))
    nodes = []
    with ctx:
        for hint in (0.1, 0.2, 0.1, 0.3):
            nodes.append(ctx.begin_call("llm", WrapOptions(cost_estimate_hint=hint)))
        assert pool.usage("t").reserved_usd == pytest.approx(0.7)
        threads = [threading.Thread(target=n.commit, kwargs={"cost_usd": n.reserved_usd / 2}) for n in nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert pool.usage("t").reserved_usd == 0.0
    assert pool.usage("t").spent_usd == pytest.approx(0.35)


def test_key_func_failures_refuse_safely(caplog: pytest.LogCaptureFixture) -> None:
    def boom(scope: Any) -> str:
        raise KeyError("x-api-key")

    adm = BudgetPool(1.0, window_s=60, key_func=boom).admit({})
    assert (adm.allowed, adm.status, adm.reason, adm.ledger) == (False, 503, "policy_denied", None)
    assert "key_func raised" in caplog.text and "KeyError" in caplog.text
    for bad in (42, b"acme", ["acme"]):
        caplog.clear()

        def wrong(scope: Any, bad: Any = bad) -> Any:
            return bad

        adm = BudgetPool(1.0, window_s=60, key_func=wrong).admit({})
        assert (adm.allowed, adm.status) == (False, 503)
        assert caplog.records[0].levelno == logging.ERROR


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"limit_usd": float("nan")}, ValueError),
        ({"limit_usd": float("inf")}, ValueError),
        ({"limit_usd": -1.0}, ValueError),
        ({"limit_usd": True}, TypeError),
        ({"limit_usd": "5"}, TypeError),
        ({"limit_usd": 1e7}, ValueError),
        ({"window_s": 0}, ValueError),
        ({"window_s": float("nan")}, ValueError),
        ({"window_s": "fortnight"}, ValueError),
        ({"key_func": "x-api-key"}, TypeError),
        ({"on_backend_error": "allow"}, ValueError),
        ({"limit_steps": 1.5}, TypeError),
        ({"backend": object()}, TypeError),
        ({"reservation_ttl_s": float("nan")}, ValueError),
    ],
)
def test_invalid_configuration_is_rejected(kwargs: dict[str, Any], error: type[Exception]) -> None:
    args: dict[str, Any] = {"limit_usd": 1.0, "window_s": 60, "key_func": str, **kwargs}
    with pytest.raises(error):
        BudgetPool(args.pop("limit_usd"), **args)


def test_ledger_refuses_bad_amounts_and_keys() -> None:
    pool = BudgetPool(1.0, window_s=60, key_func=str, backend=LocalBudgetBackend())
    ledger = pool.ledger("t")
    assert ledger.reserve(float("nan")) is False and ledger.refusal_status == 503
    assert ledger.reserve(-0.5) is False
    assert pool.usage("t").reserved_usd == 0.0
    with pytest.raises(TypeError):
        pool.ledger(7)  # type: ignore[arg-type]
    ledger.settle(0.123, 0.05)  # matches no reservation: charged (never lost), logged
    assert pool.usage("t").spent_usd == pytest.approx(0.05)


def test_zero_limit_refuses_everything() -> None:
    pool = BudgetPool(0.0, window_s=60, key_func=str)
    assert pool.admit("t").status == 429
    assert pool.ledger("t").reserve(0.0) is False
