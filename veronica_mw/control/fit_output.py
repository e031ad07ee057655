"""MODIFY: fit a model call's output to what is left of the budget, instead of refusing it.

Without it, a model call whose worst case (its prompt plus ``max_tokens``, or the configured
default when it sets none) does not fit what is left of ``max_cost_usd`` is refused before it is
sent. With ``FitOutputToBudget(min_output_tokens=256)`` among a context's ``policies`` (or
``instrument(fit_output=True)``, or ``veronica-mw run --fit-output``), such a call is sent instead
with its output limit lowered to what the remaining budget affords -- ``max_tokens`` /
``max_completion_tokens`` / ``max_output_tokens`` / ``generationConfig.maxOutputTokens``, per SDK --
and reserved at exactly that. The model's own ``finish_reason``/``stop_reason`` (``length``,
``max_tokens``) tells the agent the answer was cut. When even ``min_output_tokens`` do not fit, the
call is refused as before. Each lowered call records a ``modified`` event (``field``, ``from``,
``to``). A call that fits is sent unchanged, and without the policy nothing in a request changes.

The lowering is done by the adapters that build the request (the provider SDK instrumentation);
:meth:`FitOutputToBudget.check` itself allows every call, so the policy composes with any other.
"""

from __future__ import annotations

from ..kernel.policy import PolicyContext, PolicyDecision

__all__ = ["FitOutputToBudget"]

_ALLOWED = PolicyDecision(allowed=True, policy_type="fit_output")


class FitOutputToBudget:
    """Send a model call that does not fit the remaining budget with fewer output tokens (at least
    ``min_output_tokens``), reserved at exactly that; see the module docstring."""

    __slots__ = ("min_output_tokens",)

    def __init__(self, min_output_tokens: int = 256) -> None:
        if isinstance(min_output_tokens, bool) or not isinstance(min_output_tokens, int):
            raise TypeError(f"min_output_tokens must be an int, got {type(min_output_tokens).__name__}")
        if min_output_tokens < 1:
            raise ValueError(f"min_output_tokens must be at least 1, got {min_output_tokens}")
        self.min_output_tokens = min_output_tokens

    @property
    def policy_type(self) -> str:
        return "fit_output"

    def check(self, context: PolicyContext) -> PolicyDecision:
        return _ALLOWED  # the request's limit is lowered where it is built, before admission

    def reset(self) -> None:
        pass

    def affordable(self, remaining_usd: float, input_usd: float, output_usd_per_token: float) -> int | None:
        """Output tokens ``remaining_usd`` pays for after the input (None: fewer than the minimum)."""
        if output_usd_per_token <= 0.0:
            return None
        spare = remaining_usd - input_usd
        tokens = int(spare / output_usd_per_token * (1.0 - 1e-9))  # rounded down, never over
        return tokens if tokens >= self.min_output_tokens else None

    def __repr__(self) -> str:
        return f"FitOutputToBudget(min_output_tokens={self.min_output_tokens})"
