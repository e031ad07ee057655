"""Decisions and halt reason codes, shared by the kernel, the middlewares and the adapters."""

from __future__ import annotations

from enum import Enum


class StrEnum(str, Enum):
    """An enum whose members are, and print as, their plain-string codes."""

    def __str__(self) -> str:
        return str.__str__(self)  # the code, not "Decision.ALLOW"


class Decision(StrEnum):
    """Outcome of asking the kernel whether a call may run."""

    ALLOW = "allow"
    HALT = "halt"


class HaltReason(StrEnum):
    """Why a context halted. Members compare equal to their plain-string codes."""

    BUDGET_EXCEEDED = "budget_exceeded"
    STEP_LIMIT = "step_limit"
    RETRY_LIMIT = "retry_limit"
    TIMEOUT = "timeout"
    CIRCUIT_OPEN = "circuit_open"
    POLICY_DENIED = "policy_denied"
    CANCELLED = "cancelled"
    VERIFICATION_FAILED = "verification_failed"


class CallKind(StrEnum):
    """What a step is: a model call or a tool call. Both count against ``max_steps``."""

    LLM = "llm"
    TOOL = "tool"
