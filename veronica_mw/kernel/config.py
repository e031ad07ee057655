"""Limits (:class:`ExecutionConfig`) and per-call options (:class:`WrapOptions`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._validate import check_int, check_number


@dataclass(frozen=True, slots=True)
class ExecutionConfig:
    """Hard limits of one execution context. Invalid values cannot be constructed (G6).

    ``0`` means: no spend (``max_cost_usd``), no call (``max_steps``), first attempts only
    (``max_retries_total``), and no deadline (``timeout_ms``).
    """

    max_cost_usd: float
    max_steps: int
    max_retries_total: int
    timeout_ms: float = 0

    def __post_init__(self) -> None:
        # object.__setattr__ because the dataclass is frozen; normalising int costs to float
        # keeps every later comparison float-vs-float.
        object.__setattr__(self, "max_cost_usd", check_number("max_cost_usd", self.max_cost_usd))
        check_int("max_steps", self.max_steps)
        check_int("max_retries_total", self.max_retries_total)
        check_number("timeout_ms", self.timeout_ms)

    def as_dict(self) -> dict[str, float | int]:
        return {
            "max_cost_usd": self.max_cost_usd,
            "max_steps": self.max_steps,
            "max_retries_total": self.max_retries_total,
            "timeout_ms": self.timeout_ms,
        }


@dataclass(frozen=True, slots=True)
class WrapOptions:
    """How one call is named, priced and reserved.

    ``cost_estimate_hint`` is reserved before the call runs, so concurrent calls cannot jointly
    overshoot ``max_cost_usd``; the actual cost replaces it afterwards. ``cost_fn(result)``, when
    given, computes that actual cost; otherwise usage found in the result is priced for ``model``
    (or the model the result names) with genai-prices.
    """

    operation_name: str = ""
    cost_estimate_hint: float = 0.0
    model: str | None = None
    provider: str | None = None
    cost_fn: Callable[[Any], float] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "cost_estimate_hint", check_number("cost_estimate_hint", self.cost_estimate_hint)
        )
        if not isinstance(self.operation_name, str):
            raise TypeError(f"operation_name must be a str, got {type(self.operation_name).__name__}")
        for field in ("model", "provider"):
            value = getattr(self, field)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{field} must be a str or None, got {type(value).__name__}")
        if self.cost_fn is not None and not callable(self.cost_fn):
            raise TypeError("cost_fn must be callable")


DEFAULT_OPTIONS = WrapOptions()
