"""Standalone iteration limit with increment-before-check semantics."""

from __future__ import annotations

import threading
from typing import Any

from ._validate import check_int
from .policy import PolicyContext, PolicyDecision

_ALLOW = PolicyDecision(allowed=True, policy_type="step_guard")


class AgentStepGuard:
    """``step()`` returns False once ``max_steps`` steps have been taken (including this one).

    Incrementing first means ``max_steps=5`` answers True four times, then False: the fifth step
    is the last one and the loop must stop after it, never run a sixth.
    """

    __slots__ = ("max_steps", "_current", "_last_result", "_lock")

    def __init__(self, max_steps: int) -> None:
        self.max_steps = check_int("max_steps", max_steps)
        self._current = 0
        self._last_result: Any = None
        self._lock = threading.Lock()

    @property
    def policy_type(self) -> str:
        return "step_guard"

    @property
    def current_step(self) -> int:
        return self._current

    @property
    def last_result(self) -> Any:
        return self._last_result

    def step(self, result: Any = None) -> bool:
        with self._lock:
            self._current += 1
            if result is not None:
                self._last_result = result
            return self._current < self.max_steps

    def check(self, context: PolicyContext) -> PolicyDecision:
        """Deny a call when the context has already taken ``max_steps`` steps."""
        if context.step_count >= self.max_steps:
            return PolicyDecision(
                allowed=False,
                policy_type="step_guard",
                reason=f"{context.step_count} steps reached the limit of {self.max_steps}",
                partial_result=self._last_result,
            )
        return _ALLOW

    def reset(self) -> None:
        with self._lock:
            self._current = 0
            self._last_result = None
