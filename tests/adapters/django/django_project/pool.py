"""A budget pool for the settings-based tests, loaded by dotted path (our own interface, not a framework)."""

from __future__ import annotations

from typing import Any

from veronica_mw import CircuitBreaker

from ....web.wsgi_support import Admission, FakePool, Ledger

BREAKER = CircuitBreaker(failure_threshold=1, recovery_timeout=7.2)
LEDGER = Ledger(left_usd=0.015)
OPEN_POOL = FakePool(Admission(allowed=True, headers=[("RateLimit-Remaining", "4")], ledger=LEDGER))
POOL = FakePool(Admission(allowed=False, status=429, retry_after_s=4.5, headers=[("RateLimit", "t=5")]))


def plan_config(meta: dict[str, object]) -> object:
    from veronica_mw import ExecutionConfig

    if meta.get("HTTP_X_PLAN") == "free":
        return ExecutionConfig(max_cost_usd=0.0, max_steps=1, max_retries_total=0)
    if meta.get("HTTP_X_PLAN") == "broken":
        raise RuntimeError("plan lookup failed")
    return ExecutionConfig(max_cost_usd=1.0, max_steps=10, max_retries_total=0)

WARNINGS: list[Any] = []


def record_warning(event: Any) -> None:
    """``settings.VERONICA['on_warn']`` of the soft-limit test."""
    WARNINGS.append(event)
