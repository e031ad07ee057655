"""Verification and control of calls: output checks, model downgrade and human approvals.

Everything here plugs into the kernel (:mod:`veronica_mw.kernel._control`), so every adapter, the
provider instrumentation and explicit ``ctx.call_llm`` get it at once.
"""

from __future__ import annotations

from ..kernel._control import install_verifier_builder
from ..kernel.exceptions import OutputRejected, ToolCallRejected
from ._suite import CheckSuite
from .approval import ApprovalRequest, Approve, Edit, Reject, RequireApproval
from .ask_for_more import AskForMore
from .checks import CheckResult, Forbidden, JsonOutput, MaxLength
from .downgrade import DowngradeAt
from .outputs import ModelOutput, ToolCall, extract_text
from .queue import ApprovalQueue

install_verifier_builder(CheckSuite)

__all__ = [
    "ApprovalQueue",
    "ApprovalRequest",
    "Approve",
    "AskForMore",
    "CheckResult",
    "CheckSuite",
    "DowngradeAt",
    "Edit",
    "Forbidden",
    "JsonOutput",
    "MaxLength",
    "ModelOutput",
    "OutputRejected",
    "Reject",
    "RequireApproval",
    "ToolCall",
    "ToolCallRejected",
    "extract_text",
]
