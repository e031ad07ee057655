"""Three-state circuit breaker (G4), shareable by every context that calls one upstream."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ._validate import check_int, check_number
from .policy import PolicyContext, PolicyDecision
from .reasons import StrEnum

_ALLOW = PolicyDecision(allowed=True, policy_type="circuit_breaker")


class CircuitState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    """CLOSED → OPEN after ``failure_threshold`` consecutive failures; OPEN denies everything for
    ``recovery_timeout`` seconds; then HALF_OPEN lets exactly one probe through, whose outcome
    closes or re-opens the circuit.

    One instance is meant to be shared (e.g. one per upstream model across all requests): all
    state changes happen under one lock, so concurrent callers in HALF_OPEN get one probe in total.
    A probe that never reports back is given up after another ``recovery_timeout``.
    """

    __slots__ = (
        "failure_threshold", "recovery_timeout", "_clock", "_lock", "_state", "_failures", "_opened_at",
        "_probe_started",
    )  # fmt: skip

    def __init__(
        self,
        failure_threshold: int = 5,
        recovery_timeout: float = 30.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failure_threshold = check_int("failure_threshold", failure_threshold)
        if self.failure_threshold < 1:
            raise ValueError("failure_threshold must be >= 1")
        self.recovery_timeout = check_number("recovery_timeout", recovery_timeout)
        self._clock = clock
        self._lock = threading.Lock()
        self._state = CircuitState.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._probe_started: float | None = None

    @property
    def policy_type(self) -> str:
        return "circuit_breaker"

    @property
    def state(self) -> CircuitState:
        with self._lock:
            self._maybe_half_open()
            return self._state

    @property
    def failure_count(self) -> int:
        return self._failures

    def retry_after_s(self) -> float:
        """Seconds until an OPEN circuit lets a probe through (0 when it already would)."""
        with self._lock:
            if self._state is not CircuitState.OPEN:
                return 0.0
            return max(0.0, self._opened_at + self.recovery_timeout - self._clock())

    def _maybe_half_open(self) -> None:
        # Only transition out of OPEN; evaluated under the lock so two threads cannot both see
        # the timeout expire and both become the probe.
        if self._state is CircuitState.OPEN and self._clock() - self._opened_at >= self.recovery_timeout:
            self._state = CircuitState.HALF_OPEN
            self._probe_started = None

    def check(self, context: PolicyContext | None = None) -> PolicyDecision:
        with self._lock:
            state = self._state
            if state is CircuitState.CLOSED:
                return _ALLOW
            self._maybe_half_open()
            if self._state is CircuitState.HALF_OPEN:
                now = self._clock()
                stale = self._probe_started is not None and now - self._probe_started >= self.recovery_timeout
                if self._probe_started is None or stale:
                    self._probe_started = now
                    return _ALLOW
                reason = "circuit half-open: probe in flight"
            else:
                reason = "circuit open"
            wait_ms = int(max(0.0, self._opened_at + self.recovery_timeout - self._clock()) * 1000)
            return PolicyDecision(
                allowed=False, policy_type="circuit_breaker", reason=reason, rate_limit_ms=wait_ms
            )

    def record_success(self) -> None:
        with self._lock:
            self._failures = 0
            if self._state is not CircuitState.OPEN:
                self._state = CircuitState.CLOSED
                self._probe_started = None

    def record_failure(self) -> None:
        with self._lock:
            self._failures += 1
            if self._state is CircuitState.HALF_OPEN or self._failures >= self.failure_threshold:
                self._state = CircuitState.OPEN
                self._opened_at = self._clock()
                self._probe_started = None

    def release_probe(self) -> None:
        """Give back a HALF_OPEN probe slot whose call never ran."""
        with self._lock:
            if self._state is CircuitState.HALF_OPEN:
                self._probe_started = None

    def reset(self) -> None:
        with self._lock:
            self._state = CircuitState.CLOSED
            self._failures = 0
            self._probe_started = None
