"""Ledger: one context's counters, limits and halt under its own lock, and the rule every call obeys.

Soft limits cost the common case nothing: admission and settlement compare against a *gate*, the
lower of the hard limit and the next ``warn_at`` threshold; past a gate :meth:`Ledger.soft_limit`
moves it."""

from __future__ import annotations

import math
import threading

from .config import ExecutionConfig
from .reasons import HaltReason

EPSILON = 1e-9  # float sums of exact hints may land a hair over the ceiling
INF = float("inf")


def threshold(fraction: float, limit: float) -> float:
    """The usage at which ``fraction`` of ``limit`` counts as reached. Relative slack so that a float
    sum such as ten 0.08 costs reaches 0.8 of 1.0; a zero limit has no soft limit."""
    return fraction * limit * (1.0 - 1e-9) if limit > 0 else INF


def _cost_gate(config: ExecutionConfig, mark: float) -> float:
    return min(config.max_cost_usd + EPSILON, mark)


def _step_gate(config: ExecutionConfig, mark: float) -> int:
    # The call that would reach ``mark`` takes the slow path, so the warning comes with that call.
    return config.max_steps if mark == INF else min(config.max_steps, math.ceil(mark) - 1)


class Ledger:
    """The counters and limits of one context, the reason it halted (first one wins), and the lock
    that guards them (and the context's call graph)."""

    __slots__ = (
        "config", "lock", "steps", "committed", "reserved", "retries", "in_flight", "reason", "detail",
        "retry_after", "http_status", "cost_gate", "step_gate", "warn_retries", "warned",
    )  # fmt: skip

    def __init__(self, config: ExecutionConfig) -> None:
        self.lock = threading.Lock()
        self.steps = 0
        self.committed = 0.0
        self.reserved = 0.0
        self.retries = 0
        self.in_flight = 0
        self.reason: str | None = None
        self.detail = ""
        self.retry_after: float | None = None
        self.http_status = 429
        self.warned: list[tuple[str, float]] | None = None
        self.raise_to(config)

    def raise_to(self, config: ExecutionConfig) -> None:
        """Take these limits (a new context's, or raised by on_limit under the lock): gates anew."""
        self.config = config
        if config.warn_at:
            first = config.warn_at[0]
            self.cost_gate = _cost_gate(config, threshold(first, config.max_cost_usd))
            self.step_gate = _step_gate(config, threshold(first, config.max_steps))
            self.warn_retries = threshold(first, config.max_retries_total)
        else:  # the gates are just the limits
            self.cost_gate = config.max_cost_usd + EPSILON
            self.step_gate = config.max_steps
            self.warn_retries = INF

    # -- the rule (held under the lock) --------------------------------------------------------------

    def refusal(self, kind: str, hint: float, cost_only: bool = False) -> tuple[HaltReason | None, str, bool]:
        """Why this level refused, under the lock: (reason, None if halted already; detail; whether the
        limit is reached, not merely one hint too big). ``cost_only``: a grown reservation, no step."""
        if self.reason is not None:
            return None, "", True
        config = self.config
        if not cost_only and self.steps >= config.max_steps:
            return HaltReason.STEP_LIMIT, f"max_steps={config.max_steps} reached", True
        used, limit = self.committed, config.max_cost_usd
        detail = f"cost {used:.6f} + reserved {self.reserved:.6f} + {hint:g} > {limit:g}"
        return HaltReason.BUDGET_EXCEEDED, detail, used + EPSILON >= limit

    def fits(self, usd: float) -> bool:
        """Whether ``usd`` more can be reserved for a call already admitted."""
        return (
            self.reason is None and self.committed + self.reserved + usd <= self.config.max_cost_usd + EPSILON
        )

    def settle(self, reserved: float, cost: float, refund_step: bool) -> bool:
        """Give back ``reserved``, commit ``cost`` (and the step, for a call that never ran);
        whether the committed cost is now past the gate (a soft limit, or the ceiling)."""
        self.reserved -= reserved
        self.in_flight -= 1
        self.committed += cost
        if refund_step:
            self.steps -= 1
        return self.committed > self.cost_gate

    def over_ceiling(self) -> bool:
        return self.committed > self.config.max_cost_usd + EPSILON

    # -- soft limits ---------------------------------------------------------------------------------

    def soft_limit(self, dimension: str) -> tuple[list[float], float, float]:
        """The fractions of ``dimension`` newly passed (each once per ledger), the usage and the
        limit; moves the gate to the next threshold."""
        config = self.config
        passed: list[float] = []
        with self.lock:
            used, limit = (
                (self.committed, config.max_cost_usd) if dimension == "cost"
                else (self.steps, config.max_steps) if dimension == "steps"
                else (self.retries, config.max_retries_total)
            )  # fmt: skip
            warned = self.warned
            if warned is None:
                warned = self.warned = []
            following = INF
            for fraction in config.warn_at:  # ascending
                mark = threshold(fraction, limit)
                if used < mark:
                    following = mark
                    break
                if (dimension, fraction) not in warned:
                    warned.append((dimension, fraction))
                    passed.append(fraction)
            if dimension == "cost":
                self.cost_gate = _cost_gate(config, following)
            elif dimension == "steps":
                self.step_gate = _step_gate(config, following)
            else:
                self.warn_retries = following
        return passed, used, limit
