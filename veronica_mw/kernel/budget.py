"""Standalone USD ceiling with check-before-commit semantics (G1 outside a context)."""

from __future__ import annotations

import threading

from ._validate import check_number
from .policy import PolicyContext, PolicyDecision

_ALLOW = PolicyDecision(allowed=True, policy_type="budget")


class BudgetEnforcer:
    """Refuses any spend that would take the total past ``limit_usd``; thread-safe."""

    __slots__ = ("limit_usd", "_spent", "_calls", "_exceeded", "_lock")

    def __init__(self, limit_usd: float) -> None:
        self.limit_usd = check_number("limit_usd", limit_usd)
        self._spent = 0.0
        self._calls = 0
        self._exceeded = False
        self._lock = threading.Lock()

    @property
    def policy_type(self) -> str:
        return "budget"

    @property
    def spent_usd(self) -> float:
        return self._spent

    @property
    def remaining_usd(self) -> float:
        return max(0.0, self.limit_usd - self._spent)

    @property
    def exceeded(self) -> bool:
        return self._exceeded

    @property
    def call_count(self) -> int:
        return self._calls

    def spend(self, amount: float) -> bool:
        """Commit ``amount`` if it fits; return False (and spend nothing) if it would not."""
        amount = check_number("amount", amount)
        with self._lock:
            projected = self._spent + amount
            if projected > self.limit_usd:
                self._exceeded = True
                return False
            self._spent = projected
            self._calls += 1
            return True

    def check(self, context: PolicyContext) -> PolicyDecision:
        """Deny when the call's cost so far plus its estimate would cross the limit."""
        if context.cost_usd + context.cost_estimate_usd > self.limit_usd:
            return PolicyDecision(
                allowed=False,
                policy_type="budget",
                reason=f"cost {context.cost_usd:.6f} + estimate would exceed ${self.limit_usd}",
            )
        return _ALLOW

    def reset(self) -> None:
        with self._lock:
            self._spent = 0.0
            self._calls = 0
            self._exceeded = False
