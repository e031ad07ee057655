"""MODIFY: continue on a cheaper model once most of the budget is spent.

``DowngradeAt(0.8, "gpt-4o-mini")`` is a runtime policy: once a context's committed cost reaches
80% of its ``max_cost_usd``, every later model call is allowed *on the fallback model* (a
``PolicyDecision`` with ``fallback_model``). The kernel reserves the call at the fallback's price
and sets ``node.fallback_model``; adapters that control the request (the provider
instrumentation, the LangChain v1 agent middleware) send it with that model and record a
``downgraded`` event; where none can, the call runs unchanged and one ``downgrade_unsupported``
event says so. The ceiling holds either way: it is enforced on what calls really cost.
"""

from __future__ import annotations

import math

from ..kernel.policy import PolicyContext, PolicyDecision

__all__ = ["DowngradeAt"]

_ALLOWED = PolicyDecision(allowed=True, policy_type="downgrade")


class DowngradeAt:
    """Model calls run on ``model`` once the committed cost is at least ``fraction`` x the ceiling."""

    __slots__ = ("fraction", "model", "_decision")

    def __init__(self, fraction: float, model: str) -> None:
        if (
            isinstance(fraction, bool)
            or not isinstance(fraction, (int, float))
            or not math.isfinite(fraction)
        ):
            raise ValueError(f"fraction must be a number between 0 and 1, got {fraction!r}")
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"fraction must be between 0 and 1, got {fraction!r}")
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a model name, got {model!r}")
        self.fraction = float(fraction)
        self.model = model
        self._decision = PolicyDecision(
            allowed=True,
            policy_type="downgrade",
            reason=f"committed cost reached {self.fraction:g} of the budget",
            degradation_action="downgrade",
            fallback_model=model,
        )

    @property
    def policy_type(self) -> str:
        return "downgrade"

    def check(self, context: PolicyContext) -> PolicyDecision:
        if context.kind != "llm" or context.max_cost_usd <= 0.0:
            return _ALLOWED
        if context.cost_usd >= self.fraction * context.max_cost_usd - 1e-12:
            return self._decision
        return _ALLOWED

    def reset(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"DowngradeAt({self.fraction:g}, {self.model!r})"
