"""The protocol of a budget above a context (a tenant pool)."""

from __future__ import annotations

from typing import Protocol


class BudgetParent(Protocol):
    """A budget above the context (e.g. a tenant pool): reserve before, settle after each call.

    A parent may also expose ``refusal_status`` (an HTTP status; 503 = the budget store is
    unavailable) and ``refusal_detail`` describing its last refusal: a 503 refusal halts the
    context with ``policy_denied`` and a 503 status hint instead of ``budget_exceeded``/429.
    """

    def reserve(self, amount_usd: float) -> bool: ...

    def settle(self, reserved_usd: float, actual_usd: float) -> None: ...

    def retry_after_s(self) -> float | None: ...
