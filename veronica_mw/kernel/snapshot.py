"""Point-in-time view of an execution context's usage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .config import ExecutionConfig


@dataclass(frozen=True, slots=True)
class ExecutionEvent:
    """Something noteworthy that is not a halt: an unpriced call, a divergence, a backend fallback."""

    kind: str
    detail: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ExecutionSnapshot:
    step_count: int
    cost_usd_accumulated: float
    cost_usd_reserved: float
    retries_used: int
    in_flight: int
    aborted: bool
    abort_reason: str | None
    abort_detail: str
    elapsed_ms: float
    chain_id: str
    config: ExecutionConfig
    retry_after_s: float | None = None
    events: tuple[ExecutionEvent, ...] = ()
    # The HTTP status a middleware answers a halt with: 429 for spent limits, 503 when the halt
    # came from an unavailable budget store (a fail-closed tenant pool).
    http_status: int = 429
    name: str = ""
    # Snapshots of the contexts nested in this one, each with its own usage (which this
    # context's counters already include).
    children: tuple[ExecutionSnapshot, ...] = ()
    # The soft limits passed so far, as (dimension, fraction), in the order they were passed.
    soft_limits: tuple[tuple[str, float], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form used in HTTP problem bodies and the demo output."""
        return {
            "name": self.name,
            "chain_id": self.chain_id,
            "aborted": self.aborted,
            "reason": self.abort_reason,
            "steps_used": self.step_count,
            "cost_usd_used": round(self.cost_usd_accumulated, 9),
            "retries_used": self.retries_used,
            "elapsed_ms": round(self.elapsed_ms, 3),
            "limits": self.config.as_dict(),
            "soft_limits": [{"dimension": d, "fraction": f} for d, f in self.soft_limits],
            "children": [child.as_dict() for child in self.children],
        }
