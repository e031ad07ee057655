"""Decisions and halt reason codes, shared by the kernel, the middlewares and the adapters."""

from __future__ import annotations

from enum import Enum


class Decision(str, Enum):
    """Outcome of asking the kernel whether a call may run."""

    ALLOW = "allow"
    HALT = "halt"

    def __str__(self) -> str:
        return self.value


class HaltReason(str, Enum):
    """Why a context halted. Members compare equal to their plain-string codes."""

    BUDGET_EXCEEDED = "budget_exceeded"
    STEP_LIMIT = "step_limit"
    RETRY_LIMIT = "retry_limit"
    TIMEOUT = "timeout"
    CIRCUIT_OPEN = "circuit_open"
    POLICY_DENIED = "policy_denied"
    CANCELLED = "cancelled"
    VERIFICATION_FAILED = "verification_failed"

    def __str__(self) -> str:
        return self.value


class CallKind(str, Enum):
    """What a step is: a model call or a tool call. Both count against ``max_steps``."""

    LLM = "llm"
    TOOL = "tool"

    def __str__(self) -> str:
        return self.value
