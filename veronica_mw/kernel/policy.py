"""The policy protocol and the pipeline that composes policies (first denial wins, no override)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


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

    __slots__ = ("_policies",)

    def __init__(self, policies: Iterable[RuntimePolicy] = ()) -> None:
        policies = tuple(policies)
        for policy in policies:
            if not callable(getattr(policy, "check", None)):
                raise TypeError(f"{policy!r} is not a RuntimePolicy (it has no check() method)")
        self._policies = policies

    @property
    def policies(self) -> tuple[RuntimePolicy, ...]:
        return self._policies

    def evaluate(self, context: PolicyContext) -> PolicyDecision:
        for policy in self._policies:
            decision = policy.check(context)
            if not decision.allowed:
                return decision
        return ALLOWED

    def reset(self) -> None:
        for policy in self._policies:
            policy.reset()

    def __len__(self) -> int:
        return len(self._policies)
