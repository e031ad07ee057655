"""Limits (:class:`ExecutionConfig`) and per-call options (:class:`WrapOptions`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._validate import check_fractions, check_int, check_number


@dataclass(frozen=True, slots=True)
class ExecutionConfig:
    """Hard limits of one execution context. Invalid values cannot be constructed (G6).

    ``0`` means: no spend (``max_cost_usd``), no call (``max_steps``), first attempts only
    (``max_retries_total``), and no deadline (``timeout_ms``).

    ``warn_at`` are soft limits: fractions in (0, 1) of each limit (cost, steps, retries) at which
    the context records a ``soft_limit`` event, logs a WARNING and calls its ``on_warn`` callback,
    once per dimension and fraction. They never refuse a call.
    """

    max_cost_usd: float
    max_steps: int
    max_retries_total: int
    timeout_ms: float = 0
    warn_at: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        # object.__setattr__ because the dataclass is frozen; normalising int costs to float
        # keeps every later comparison float-vs-float.
        object.__setattr__(self, "max_cost_usd", check_number("max_cost_usd", self.max_cost_usd))
        check_int("max_steps", self.max_steps)
        check_int("max_retries_total", self.max_retries_total)
        check_number("timeout_ms", self.timeout_ms)
        object.__setattr__(self, "warn_at", check_fractions("warn_at", self.warn_at))

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

    Two fields only describe the call to observers (OpenTelemetry, the audit log); the kernel
    ignores them: ``gen_ai_operation`` is what kind of model call it is (``"chat"`` when empty,
    ``"embeddings"``, ``"text_completion"``, ...), and ``session_message`` marks a step that is a
    message of a session (a WebSocket receive or send) rather than a tool call.
    """

    operation_name: str = ""
    cost_estimate_hint: float = 0.0
    model: str | None = None
    provider: str | None = None
    cost_fn: Callable[[Any], float] | None = None
    gen_ai_operation: str = ""
    session_message: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "cost_estimate_hint", check_number("cost_estimate_hint", self.cost_estimate_hint)
        )
        for field in ("operation_name", "gen_ai_operation"):
            if not isinstance(getattr(self, field), str):
                raise TypeError(f"{field} must be a str, got {type(getattr(self, field)).__name__}")
        if not isinstance(self.session_message, bool):
            raise TypeError(f"session_message must be a bool, got {type(self.session_message).__name__}")
        for field in ("model", "provider"):
            value = getattr(self, field)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{field} must be a str or None, got {type(value).__name__}")
        if self.cost_fn is not None and not callable(self.cost_fn):
            raise TypeError("cost_fn must be callable")


DEFAULT_OPTIONS = WrapOptions()
