"""Lower a provider request's output limit to what the remaining budget affords (FitOutputToBudget).

Consulted by :func:`._provider_calls.begin` before the reservation is priced, and only when a
:class:`~veronica_mw.FitOutputToBudget` applies -- one among the context's policies, or the
process-wide one of ``instrument(fit_output=True)`` / ``veronica-mw run --fit-output``. A plan whose
worst case fits what is left (``max_cost_usd`` minus committed and reserved) is left as it is; one
that does not gets ``output_tokens`` lowered (per choice, rounded down) and ``fitted`` set to the
new per-choice limit, which the SDK adapter writes into the request (:func:`lowered_body`). Below
the policy's ``min_output_tokens`` nothing changes and the kernel refuses the call as usual.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import ExecutionContext
from .. import instrumentation as _instrumentation
from ..control.fit_output import FitOutputToBudget
from . import _provider_claims as claims
from ._provider_estimate import worst_case

if TYPE_CHECKING:
    from ._provider_calls import Plan

__all__ = ["fit", "lowered_body", "policy_of"]


def policy_of(ctx: ExecutionContext) -> FitOutputToBudget | None:
    """The FitOutputToBudget that applies in ``ctx``: its own (policies=), else the process-wide one."""
    pipeline = getattr(ctx, "_pipeline", None)
    for policy in getattr(pipeline, "policies", None) or ():
        if isinstance(policy, FitOutputToBudget):
            return policy
    found = getattr(_instrumentation.settings, "fit_output", None)
    return found if isinstance(found, FitOutputToBudget) else None


def fit(ctx: ExecutionContext, plan: Plan) -> int | None:
    """Lower ``plan`` to fit the remaining budget; the original per-choice limit when it was
    lowered, else None (it fits, cannot be priced, or not even the minimum fits)."""
    policy = policy_of(ctx)
    if policy is None or plan.limit_field is None or plan.output_tokens <= 0:
        return None
    worst = worst_case(plan.model, plan.provider, plan.input_tokens, plan.output_tokens)
    if worst is None:
        return None
    snap = ctx.get_snapshot()
    # A step offered by the layer above (LiteLLM over the OpenAI SDK) was fitted there already;
    # its reservation is this request's own, so it counts as available here.
    held = claims.offered_reservation(ctx)
    remaining = ctx.config.max_cost_usd - snap.cost_usd_accumulated - snap.cost_usd_reserved + held
    if worst <= remaining:
        return None
    input_usd = worst_case(plan.model, plan.provider, plan.input_tokens, 0) or 0.0
    per_token = (worst - input_usd) / plan.output_tokens
    choices = max(1, plan.choices)
    affordable = policy.affordable(remaining, input_usd, per_token * choices)
    if affordable is None:
        return None
    original = plan.output_tokens // choices
    plan.fitted = min(affordable, original)
    plan.output_tokens = plan.fitted * choices
    return original


def lowered_body(body: Mapping[str, Any], plan: Plan) -> dict[str, Any]:
    """A copy of ``body`` with the plan's limit field set to its fitted value (nested fields, like
    Gemini's ``generationConfig.maxOutputTokens``, as ``"a.b"``)."""
    assert plan.limit_field is not None and plan.fitted is not None
    head, _, rest = plan.limit_field.partition(".")
    copy = dict(body)
    if rest:
        inner = copy.get(head)
        copy[head] = {**(inner if isinstance(inner, Mapping) else {}), rest: plan.fitted}
    else:
        copy[head] = plan.fitted
    return copy
