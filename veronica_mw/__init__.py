"""veronica-mw: hard bounds on LLM agent cost, steps, retries and time, per request and per run."""

from __future__ import annotations

from .asgi import VeronicaASGIMiddleware
from .binding import ContextBinding
from .budget import BudgetEnforcer
from .cancellation import CancellationToken
from .circuit_breaker import CircuitBreaker, CircuitState
from .config import ExecutionConfig, WrapOptions
from .context import get_current_execution_context
from .exceptions import ExecutionHalted, MissingFrameworkError
from .execution import BudgetParent, ExecutionContext
from .graph import CallNode, ExecutionGraph
from .policy import PolicyContext, PolicyDecision, PolicyPipeline, RuntimePolicy
from .pricing import TokenUsage
from .reasons import CallKind, Decision, HaltReason
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
    "CallKind",
    "CallNode",
    "CancellationToken",
    "CircuitBreaker",
    "CircuitState",
    "ContextBinding",
    "Decision",
    "ExecutionConfig",
    "ExecutionContext",
    "ExecutionEvent",
    "ExecutionGraph",
    "ExecutionHalted",
    "ExecutionSnapshot",
    "HaltReason",
    "MissingFrameworkError",
    "PolicyContext",
    "PolicyDecision",
    "PolicyPipeline",
    "RetryContainer",
    "RuntimePolicy",
    "SharedTimeoutPool",
    "TokenUsage",
    "VeronicaASGIMiddleware",
    "VeronicaWSGIMiddleware",
    "WrapOptions",
    "get_current_execution_context",
]
