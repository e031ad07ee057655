"""The policy protocol and the pipeline that composes policies (first denial wins, no override).

A policy can also *modify* an allowed call: a decision with ``fallback_model`` runs a model call on
that model instead (the first such decision wins). Policies that also implement
:class:`~veronica_mw.kernel._control.ApprovalGate` are asked to approve matching tool calls.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ._control import ApprovalGate


@dataclass(slots=True)
class PolicyContext:
    """What a policy sees about the call being decided."""

    cost_usd: float = 0.0
    step_count: int = 0
    retries_used: int = 0
    cost_estimate_usd: float = 0.0
    kind: str = ""
    operation_name: str = ""
    entity_id: str = ""
    chain_id: str = ""
    max_cost_usd: float = 0.0  # the context's ceiling, for policies that act on a fraction of it
    timestamp: float = field(default_factory=time.time)
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    allowed: bool
    policy_type: str
    reason: str = ""
    partial_result: Any = None
    degradation_action: str | None = None
    fallback_model: str | None = None
    rate_limit_ms: int = 0


ALLOWED = PolicyDecision(allowed=True, policy_type="pipeline")


@runtime_checkable
class RuntimePolicy(Protocol):
    """Anything with ``check(PolicyContext) -> PolicyDecision``, ``reset()`` and ``policy_type``."""

    def check(self, context: PolicyContext) -> PolicyDecision: ...

    def reset(self) -> None: ...

    @property
    def policy_type(self) -> str: ...


class PolicyPipeline:
    """Evaluates policies in order; the first denial is returned and nothing can override it."""

    __slots__ = ("_policies", "_gates")

    def __init__(self, policies: Iterable[RuntimePolicy] = ()) -> None:
        policies = tuple(policies)
        for policy in policies:
            if not callable(getattr(policy, "check", None)):
                raise TypeError(f"{policy!r} is not a RuntimePolicy (it has no check() method)")
        self._policies = policies
        self._gates = tuple(p for p in policies if isinstance(p, ApprovalGate))

    @property
    def gates(self) -> tuple[ApprovalGate, ...]:
        """The policies that approve tool calls (asked by ``begin_call`` before a tool runs)."""
        return self._gates

    @property
    def policies(self) -> tuple[RuntimePolicy, ...]:
        return self._policies

    def evaluate(self, context: PolicyContext) -> PolicyDecision:
        """The first denial; else the first decision that modifies the call; else ALLOWED."""
        modified: PolicyDecision | None = None
        for policy in self._policies:
            decision = policy.check(context)
            if not decision.allowed:
                return decision
            if modified is None and decision.fallback_model is not None:
                modified = decision
        return modified or ALLOWED

    def reset(self) -> None:
        for policy in self._policies:
            policy.reset()

    def __len__(self) -> int:
        return len(self._policies)
