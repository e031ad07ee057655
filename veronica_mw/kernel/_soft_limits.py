"""Soft limits (``ExecutionConfig.warn_at``): say once that a limit is X% used; never refuse a call.

They cost the hot path nothing: the comparisons admission and settlement make anyway use a gate,
the lower of the hard limit and the next soft threshold (``_step_gate``: steps before a call is
admitted; ``_cost_gate``: committed cost). Past a gate, the slow path finds out which one it was.
:meth:`SoftLimits._soft_limit` then decides under the context's lock which fractions were passed
(each (dimension, fraction) once per context) and moves the gate; outside the lock it records a
``soft_limit`` event, logs one WARNING and calls ``on_warn``.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .snapshot import ExecutionEvent

if TYPE_CHECKING:
    from .config import ExecutionConfig

logger = logging.getLogger("veronica_mw")

INF = float("inf")
EPSILON = 1e-9  # float sums of exact hints may land a hair over the ceiling


def threshold(fraction: float, limit: float) -> float:
    """The usage at which ``fraction`` of ``limit`` counts as reached. Relative slack so that a float
    sum such as ten 0.08 costs reaches 0.8 of 1.0; a zero limit has no soft limit."""
    return fraction * limit * (1.0 - 1e-9) if limit > 0 else INF


def cost_gate(config: ExecutionConfig, mark: float) -> float:
    """Committed cost above which settlement takes the slow path (``mark``: next soft threshold)."""
    return min(config.max_cost_usd + EPSILON, mark)


def step_gate(config: ExecutionConfig, mark: float) -> int:
    """Steps already taken at which admission takes the slow path: the call that would reach
    ``mark`` (so the warning comes with that call), or the step limit."""
    return config.max_steps if mark == INF else min(config.max_steps, math.ceil(mark) - 1)


def first_gates(config: ExecutionConfig) -> tuple[float, int, float]:
    """(cost gate, step gate, retry threshold) of a fresh context."""
    if not config.warn_at:
        return config.max_cost_usd + EPSILON, config.max_steps, INF
    first = config.warn_at[0]
    return (
        cost_gate(config, threshold(first, config.max_cost_usd)),
        step_gate(config, threshold(first, config.max_steps)),
        threshold(first, config.max_retries_total),
    )


def _limit(config: ExecutionConfig, dimension: str) -> float:
    if dimension == "cost":
        return config.max_cost_usd
    return config.max_steps if dimension == "steps" else config.max_retries_total


class SoftLimits:
    """Mixin of :class:`~veronica_mw.ExecutionContext`; the slots live there."""

    if not TYPE_CHECKING:
        __slots__ = ()

    if TYPE_CHECKING:
        config: ExecutionConfig
        _lock: threading.Lock
        _steps: int
        _committed: float
        _retries: int
        _cost_gate: float
        _step_gate: int
        _warn_retries: float
        _warned: list[tuple[str, float]] | None
        _on_warn: Callable[[ExecutionEvent], Any] | None
        _name: str

        @property
        def chain_id(self) -> str: ...
        def _record_event(self, event: ExecutionEvent, level: int) -> None: ...

    def _used(self, dimension: str) -> float:
        if dimension == "cost":
            return self._committed
        return self._steps if dimension == "steps" else self._retries

    def _soft_limit(self, dimension: str) -> None:
        """The usage of ``dimension`` reached its next threshold: warn for each fraction passed."""
        config = self.config
        limit = _limit(config, dimension)
        passed: list[float] = []
        with self._lock:
            used = self._used(dimension)
            warned = self._warned
            if warned is None:
                warned = self._warned = []
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
                self._cost_gate = cost_gate(config, following)
            elif dimension == "steps":
                self._step_gate = step_gate(config, following)
            else:
                self._warn_retries = following
        for fraction in passed:
            self._warn(dimension, fraction, used, limit)

    def _warn(self, dimension: str, fraction: float, used: float, limit: float) -> None:
        shown = f"{used:.6f} of {limit:g} USD" if dimension == "cost" else f"{used:g} of {limit:g}"
        event = ExecutionEvent(
            "soft_limit",
            f"{dimension} at {shown}: passed {fraction:g} of the limit",
            {
                "dimension": dimension,
                "fraction": fraction,
                "used": used,
                "limit": limit,
                "context": self._name,
                "chain_id": self.chain_id,
            },
        )
        self._record_event(event, logging.WARNING)
        callback = self._on_warn
        if callback is not None:
            try:
                callback(event)
            except Exception:  # a warning callback must never break the call that crossed the line
                logger.exception("veronica_mw: on_warn callback %r failed", callback)

    def _cost_passed(self) -> bool:
        """The committed cost passed its gate: warn if it was a soft limit; True if it was the
        ceiling (the call that got it there is the last)."""
        if self.config.warn_at:
            self._soft_limit("cost")
        return self._committed > self.config.max_cost_usd + EPSILON

    @property
    def soft_limits_passed(self) -> tuple[tuple[str, float], ...]:
        """The soft limits this context has passed, as (dimension, fraction), in order."""
        return tuple(self._warned or ())
