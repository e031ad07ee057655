"""veronica-mw: hard bounds on LLM agent cost, steps, retries and time, per request and per run."""

from __future__ import annotations

from .asgi import VeronicaASGIMiddleware
from .binding import ContextBinding
from .budget import BudgetEnforcer
from .budget_pool import BudgetPool, LocalBudgetBackend
from .cancellation import CancellationToken
from .circuit_breaker import CircuitBreaker, CircuitState
from .config import ExecutionConfig, WrapOptions
from .context import get_current_execution_context
from .distributed_breaker import DistributedCircuitBreaker
from .exceptions import ExecutionHalted, MissingFrameworkError
from .execution import BudgetParent, ExecutionContext
from .graph import CallNode, ExecutionGraph
from .policy import PolicyContext, PolicyDecision, PolicyPipeline, RuntimePolicy
from .pricing import TokenUsage
from .reasons import CallKind, Decision, HaltReason
from .redis_backend import RedisBudgetBackend
from .retry import RetryContainer
from .snapshot import ExecutionEvent, ExecutionSnapshot
from .step_guard import AgentStepGuard
from .timeout_pool import SharedTimeoutPool
from .wsgi import VeronicaWSGIMiddleware

__version__ = "0.1.0"

__all__ = [
    "AgentStepGuard",
    "BudgetEnforcer",
    "BudgetParent",
    "BudgetPool",
    "CallKind",
    "CallNode",
    "CancellationToken",
    "CircuitBreaker",
    "CircuitState",
    "ContextBinding",
    "Decision",
    "DistributedCircuitBreaker",
    "ExecutionConfig",
    "ExecutionContext",
    "ExecutionEvent",
    "ExecutionGraph",
    "ExecutionHalted",
    "ExecutionSnapshot",
    "HaltReason",
    "LocalBudgetBackend",
    "MissingFrameworkError",
    "PolicyContext",
    "PolicyDecision",
    "PolicyPipeline",
    "RedisBudgetBackend",
    "RetryContainer",
    "RuntimePolicy",
    "SharedTimeoutPool",
    "TokenUsage",
    "VeronicaASGIMiddleware",
    "VeronicaWSGIMiddleware",
    "WrapOptions",
    "get_current_execution_context",
]
