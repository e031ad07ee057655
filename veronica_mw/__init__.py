"""veronica-mw: hard bounds on LLM agent cost, steps, retries and time, per request and per run."""

from __future__ import annotations

from ._version import __version__ as __version__
from .control import (
    ApprovalQueue,
    ApprovalRequest,
    Approve,
    AskForMore,
    CheckResult,
    DowngradeAt,
    Edit,
    Forbidden,
    JsonOutput,
    MaxLength,
    ModelOutput,
    Reject,
    RequireApproval,
    ToolCall,
)
from .control.fit_output import FitOutputToBudget
from .instrumentation import instrument, uninstrument
from .kernel.binding import ContextBinding
from .kernel.budget import BudgetEnforcer
from .kernel.cancellation import CancellationToken
from .kernel.circuit_breaker import CircuitBreaker, CircuitState
from .kernel.config import ExecutionConfig, WrapOptions
from .kernel.context import get_current_execution_context
from .kernel.exceptions import ExecutionHalted, MissingFrameworkError, OutputRejected, ToolCallRejected
from .kernel.execution import ExecutionContext
from .kernel.graph import CallNode, ExecutionGraph
from .kernel.observer import Observer, add_observer, remove_observer
from .kernel.parent import AsyncBudgetParent, BudgetParent
from .kernel.policy import PolicyContext, PolicyDecision, PolicyPipeline, RuntimePolicy
from .kernel.pricing import TokenUsage
from .kernel.reasons import CallKind, Decision, HaltReason
from .kernel.retry import RetryContainer
from .kernel.snapshot import ExecutionEvent, ExecutionSnapshot
from .kernel.step_guard import AgentStepGuard
from .kernel.timeout_pool import SharedTimeoutPool
from .observe.audit import AuditLog
from .observe.otel import auto_enable as _otel_auto_enable
from .pools.budget_pool import BudgetPool, LocalBudgetBackend
from .pools.distributed_breaker import DistributedCircuitBreaker
from .pools.redis_backend import RedisBudgetBackend
from .web.asgi import VeronicaASGIMiddleware
from .web.wsgi import VeronicaWSGIMiddleware

# OpenTelemetry is on when opentelemetry-api is installed (VERONICA_MW_OTEL=0 turns it off); this
# registers a stand-in observer and imports no opentelemetry module (see veronica_mw.observe.otel).
_otel_auto_enable()

__all__ = [
    "AgentStepGuard",
    "ApprovalQueue",
    "ApprovalRequest",
    "Approve",
    "AskForMore",
    "AsyncBudgetParent",
    "AuditLog",
    "BudgetEnforcer",
    "BudgetParent",
    "BudgetPool",
    "CallKind",
    "CallNode",
    "CancellationToken",
    "CheckResult",
    "CircuitBreaker",
    "CircuitState",
    "ContextBinding",
    "Decision",
    "DistributedCircuitBreaker",
    "DowngradeAt",
    "Edit",
    "ExecutionConfig",
    "ExecutionContext",
    "ExecutionEvent",
    "ExecutionGraph",
    "ExecutionHalted",
    "ExecutionSnapshot",
    "FitOutputToBudget",
    "Forbidden",
    "HaltReason",
    "JsonOutput",
    "LocalBudgetBackend",
    "MaxLength",
    "MissingFrameworkError",
    "ModelOutput",
    "Observer",
    "OutputRejected",
    "PolicyContext",
    "PolicyDecision",
    "PolicyPipeline",
    "RedisBudgetBackend",
    "Reject",
    "RequireApproval",
    "RetryContainer",
    "RuntimePolicy",
    "SharedTimeoutPool",
    "TokenUsage",
    "ToolCall",
    "ToolCallRejected",
    "VeronicaASGIMiddleware",
    "VeronicaWSGIMiddleware",
    "WrapOptions",
    "add_observer",
    "get_current_execution_context",
    "instrument",
    "remove_observer",
    "uninstrument",
]
